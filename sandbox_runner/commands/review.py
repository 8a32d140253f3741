"""`fks review RUN`: what each step of a sandboxed run left on its branch, and how to land it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from sandbox_runner.commands.runs import load_run, open_store, run_status, step_status
from sandbox_runner.console.ansi import diff_colour, strip_escapes
from sandbox_runner.console.lines import LINE_BYTES, bounded_lines, shown_line
from sandbox_runner.errors import EXIT_COMPLETE
from sandbox_runner.git.repo import branch_exists, checkout_of, open_repo
from sandbox_runner.git.runner import GitError, git, git_ok, git_output
from sandbox_runner.records.places import elsewhere, same_place
from sandbox_runner.records.record import RunRecord, StepRecord

_SUBJECT_BYTES = 200
"""Bytes shown of a commit's subject (a commit message may be any size)."""
_MAX_COMMITS = 200
_MAX_STAT_LINES = 200


def run(*, run_ref: str, diff: bool, cwd: Path | None) -> int:
    """Print every step branch of the run: commits, diffstat, merged or not; `diff` adds the patch."""
    store = open_store(cwd)
    record = load_run(store, run_ref)
    state = run_status(record)
    _say(f"Run {record.id}: {record.label} ({state})")
    if not any(step.branch for step in record.steps):
        if record.options.sandbox:
            _say("No step of this run got a branch (it stopped before the first step started).")
        elif record.options.forge_task:
            _say(f"Its stages committed on the task's branch {record.base_branch}:")
            _say(f"  git log --stat {record.options.base or 'main'}..{record.base_branch}")
        else:
            _say(
                f"This run ran in place in {record.cwd}, without --sandbox: its steps made no branches to review."
            )
            _say("Their commits are on the branch that was checked out there (see `git log`).")
        _say(f"Steps and iterations: fks show {record.id}")
        return EXIT_COMPLETE
    for step in record.steps:
        _say("")
        _review_step(store.project, record, step, state, diff=diff)
    return EXIT_COMPLETE


def _review_step(
    project: Path, record: RunRecord, step: StepRecord, run_state: str, *, diff: bool
) -> None:
    status = step_status(step, run_state)
    if step.reason and step.reason != status:
        status += f", {step.reason}"
    _say(f"Step {step.index}: {step.agent} ({status})")
    if not step.branch:
        _say("  no branch (the step never started)")
        return
    named = step.repo or record.cwd
    base = step.base_branch or record.base_branch
    _step_header(step, Path(named), base)
    if not same_place(named, project):  # a record copied here, or made elsewhere: never git there
        _say(f"  {elsewhere(named, project)}")
        return
    repo = project
    tip = _tip(repo, step)
    if tip is None:
        return
    since = _start(repo, step, base)
    if since is None:
        _say("  (cannot tell where the step started: its start commit and base are gone)")
        return
    _step_changes(repo, step, base, since, tip, diff=diff)


def _step_header(step: StepRecord, repo: Path, base: str | None) -> None:
    """The step's branch, repository and base, and whether it merged."""
    _say(f"  branch:    {step.branch}")
    _say(f"  repo:      {repo}")
    _say(f"  base:      {base or '?'}")
    if step.merged:
        at = f" at {step.merge_commit[:12]}" if step.merge_commit else ""
        _say(f"  merged:    yes, into {base or '?'}{at}")
    else:
        _say("  merged:    no")
    if step.conflicts:
        _say(
            f"  conflicts: {', '.join(step.conflicts)} (with {base or 'the base'} when fks tried to merge)"
        )


def _step_changes(
    repo: Path, step: StepRecord, base: str | None, since: str, tip: str, *, diff: bool
) -> None:
    """The step's commits and diffstat since `since`, how to land them, and the patch."""
    _commits(repo, since, tip)
    changed = not git_ok(repo, "diff", "--quiet", since, tip)
    if changed:
        _say("  changes:")
        _stat(repo, since, tip)
    if not step.merged:
        _landing_commands(repo, tip, base, is_branch=tip == step.branch)
    if diff and changed:
        _say("")
        _diff(repo, since, tip, colour=sys.stdout.isatty())


def _commits(repo: Path, since: str, branch: str) -> None:
    """One line per commit (at most `_MAX_COMMITS`), each subject cut to `_SUBJECT_BYTES`."""
    count = int(git(repo, "rev-list", "--count", f"{since}..{branch}"))
    _say(f"  commits since {since[:12]}:" if count else f"  no commits since {since[:12]}")
    args = ("log", f"-n{_MAX_COMMITS}", "--no-decorate", "--format=%h %s", f"{since}..{branch}")
    with git_output(repo, *args) as out:
        for raw, cut in bounded_lines(out, _SUBJECT_BYTES):
            _say(f"    {shown_line(raw, cut)}")
    if count > _MAX_COMMITS:
        _say(f"    … and {count - _MAX_COMMITS} more commits (git log {since[:12]}..{branch})")


def _stat(repo: Path, since: str, branch: str) -> None:
    """The diffstat: its first `_MAX_STAT_LINES` lines and its summary line."""
    hidden = 0
    last = ""
    with git_output(repo, "diff", "--stat", since, branch) as out:
        for number, (raw, cut) in enumerate(bounded_lines(out, LINE_BYTES)):
            if number < _MAX_STAT_LINES:
                _say(f"   {shown_line(raw, cut)}")
            else:
                hidden += 1
                last = shown_line(raw, cut)
    if hidden > 1:
        _say(f"    … {hidden - 1} more files")
    if last:
        _say(f"   {last}")


def _diff(repo: Path, since: str, branch: str, *, colour: bool) -> None:
    """The patch, streamed, each line neutralised and cut to `LINE_BYTES`."""
    with git_output(repo, "diff", "--no-color", "--no-ext-diff", since, branch) as out:
        for raw, cut in bounded_lines(out, LINE_BYTES):
            line = shown_line(raw, cut)
            _say(diff_colour(line) if colour else line, clean=False)


def _tip(repo: Path, step: StepRecord) -> str | None:
    """What to review: the step's branch, or once it is deleted the tip its record keeps (while
    that commit exists); None when there is nothing left to show."""
    assert step.branch is not None
    if branch_exists(repo, step.branch):
        return step.branch
    gone = "  the branch no longer exists (deleted, e.g. by `fks clean --branches`)"
    head = step.head_commit
    if head and git_ok(repo, "cat-file", "-e", f"{head}^{{commit}}"):
        _say(f"{gone}; its recorded commits up to {head[:12]}:")
        return head
    _say(f"{gone}, and the commits its record names are gone too")
    return None


def _start(repo: Path, step: StepRecord, base: str | None) -> str | None:
    """The commit the step's branch started from (or where it forked off its base)."""
    if step.start_commit and git_ok(repo, "cat-file", "-e", f"{step.start_commit}^{{commit}}"):
        return step.start_commit
    if base is not None and step.branch is not None:
        try:
            return git(repo, "merge-base", base, step.branch)
        except GitError:
            return None
    return None


def _landing_commands(repo: Path, branch: str, base: str | None, *, is_branch: bool) -> None:
    quoted_branch = shlex.quote(branch)
    where = shlex.quote(str(repo))
    _say("  to land it:")
    if base is None:
        _say(f"    git -C {where} merge {quoted_branch}   # on the branch it should land on")
    else:
        checkout = checkout_of(open_repo(repo, what="fks review"), base)
        if checkout is not None:
            _say(f"    git -C {shlex.quote(str(checkout))} merge {quoted_branch}")
        else:
            _say(
                f"    git -C {where} switch {shlex.quote(base)} && git -C {where} merge {quoted_branch}"
            )
    if is_branch:
        _say("  to discard it:")
        _say(f"    git -C {where} branch -D {quoted_branch}")


def _say(text: str, *, clean: bool = True) -> None:
    # Names, subjects and paths may come from the agent: never a control sequence of theirs.
    if clean:
        text = strip_escapes(text, keep="\t")
    sys.stdout.buffer.write(text.encode("utf-8", "replace") + b"\n")
    sys.stdout.buffer.flush()
