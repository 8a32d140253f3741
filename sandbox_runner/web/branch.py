"""What a step left on its branch, for the run page: its commits, diffstat and the patch
highlighted as HTML (`patch`). Read as `fks review` reads it: in the user's repository, never
in anything the agent wrote; every output bounded, every line neutralised."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from sandbox_runner.console.lines import LINE_BYTES, bounded_lines, shown_line
from sandbox_runner.git.repo import branch_exists
from sandbox_runner.git.runner import GitError, git, git_ok, git_output
from sandbox_runner.records.places import elsewhere, same_place
from sandbox_runner.records.record import RunRecord, StepRecord
from sandbox_runner.web.patch import Budget, highlight_patch

MAX_COMMITS = 200
SUBJECT_BYTES = 200
MAX_STAT_LINES = 200
DIFF_BYTES = 1 << 20
"""Bytes of a step's patch read for the page (more is cut, saying so)."""
PAGE_DIFF_BYTES = 2 << 20
"""Bytes of patches read for one page, all steps together (later steps then show none)."""
DIFF_LINE_BYTES = 1000
"""Bytes shown of one line of the patch."""


@dataclass(frozen=True)
class Commit:
    sha: str
    when: str
    subject: str


@dataclass
class BranchView:
    """A step branch as the run page shows it; `problem` says why there is less to show."""

    branch: str
    base: str | None
    problem: str | None = None
    since: str | None = None
    tip: str | None = None
    commits: list[Commit] = field(default_factory=list)
    more_commits: int = 0
    stat: list[str] = field(default_factory=list)
    diff: Markup | None = None
    diff_cut: bool = False
    diff_read: int = 0
    diff_skipped: bool = False
    """The patch was not read: the page already holds `PAGE_DIFF_BYTES` of patches."""


def branch_views(record: RunRecord, project: Path) -> dict[int, BranchView | None]:
    """The branch of each step (by index), with patches up to `PAGE_DIFF_BYTES` in all, read
    in `project` (the one whose `.forge/` holds `record`)."""
    views: dict[int, BranchView | None] = {}
    budget = PAGE_DIFF_BYTES
    language = Budget()
    for step in record.steps:
        view = branch_view(
            record, step, project, diff_bytes=min(DIFF_BYTES, budget), language=language
        )
        views[step.index] = view
        if view is not None:
            budget = 0 if view.diff_cut else budget - view.diff_read
    return views


def branch_view(
    record: RunRecord,
    step: StepRecord,
    project: Path,
    *,
    diff_bytes: int,
    language: Budget | None = None,
) -> BranchView | None:
    """The step's branch (None: it has none) with the first `diff_bytes` of its patch, its code
    highlighted within `language`. Read in `project` only: a record naming another repository
    (one copied into `.forge/`, say) gets a `problem` and no git runs."""
    if not step.branch:
        return None
    view = BranchView(branch=step.branch, base=step.base_branch or record.base_branch)
    named = step.repo or record.cwd
    if not same_place(named, project):
        view.problem = elsewhere(named, project)
        return view
    try:
        _fill(view, project, step, diff_bytes=diff_bytes, language=language or Budget())
    except GitError as exc:
        view.problem = f"git could not read it: {exc}"
    return view


def _fill(
    view: BranchView, repo: Path, step: StepRecord, *, diff_bytes: int, language: Budget
) -> None:
    if not repo.is_dir():
        view.problem = f"the repository {repo} no longer exists"
        return
    view.tip = _tip(repo, step)
    if view.tip is None:
        view.problem = "the branch no longer exists, nor the commits its record names"
        return
    view.since = _start(repo, step, view.base, view.tip)
    if view.since is None:
        view.problem = "cannot tell where the step started: its start commit and base are gone"
        return
    if view.tip != f"refs/heads/{step.branch}":
        view.problem = f"the branch no longer exists; its recorded commits up to {view.tip[:12]}"
    _commits(view, repo, view.since, view.tip)
    _stat(view, repo, view.since, view.tip)
    if view.stat and diff_bytes <= 0:
        view.diff_skipped = True
    elif view.stat:
        view.diff, view.diff_cut, view.diff_read = highlighted_diff(
            repo, view.since, view.tip, diff_bytes, language
        )


def _tip(repo: Path, step: StepRecord) -> str | None:
    assert step.branch is not None
    if branch_exists(repo, step.branch):
        return f"refs/heads/{step.branch}"  # a full ref: never taken for an option
    head = step.head_commit
    if head and git_ok(repo, "cat-file", "-e", f"{head}^{{commit}}"):
        return head
    return None


def _start(repo: Path, step: StepRecord, base: str | None, tip: str) -> str | None:
    """The commit the step started from, or where its commits fork off its base."""
    if step.start_commit and git_ok(repo, "cat-file", "-e", f"{step.start_commit}^{{commit}}"):
        return step.start_commit
    if base is not None:
        try:
            return git(repo, "merge-base", f"refs/heads/{base}", tip)
        except GitError:
            return None
    return None


def _commits(view: BranchView, repo: Path, since: str, tip: str) -> None:
    fmt = "--format=%H %aI %s"
    with git_output(
        repo, "log", f"-n{MAX_COMMITS}", "--no-decorate", fmt, f"{since}..{tip}"
    ) as out:
        for raw, cut in bounded_lines(out, SUBJECT_BYTES + 100):
            sha, _, rest = raw.partition(b" ")
            when, _, subject = rest.partition(b" ")
            view.commits.append(
                Commit(
                    sha=sha.decode("ascii", "replace"),
                    when=when.decode("ascii", "replace").replace("T", " "),
                    subject=shown_line(subject, cut, limit=SUBJECT_BYTES),
                )
            )
    if len(view.commits) >= MAX_COMMITS:  # else they are all there
        count = int(git(repo, "rev-list", "--count", f"{since}..{tip}"))
        view.more_commits = max(count - MAX_COMMITS, 0)


def _stat(view: BranchView, repo: Path, since: str, tip: str) -> None:
    hidden, last = 0, ""
    with git_output(repo, "diff", "--stat=200", since, tip) as out:
        for number, (raw, cut) in enumerate(bounded_lines(out, LINE_BYTES)):
            if number < MAX_STAT_LINES:
                view.stat.append(shown_line(raw, cut))
            else:
                hidden, last = hidden + 1, shown_line(raw, cut)
    if hidden > 1:
        view.stat.append(f"… {hidden - 1} more files")
    if last:
        view.stat.append(last)


def highlighted_diff(
    repo: Path, since: str, tip: str, limit: int, language: Budget
) -> tuple[Markup, bool, int]:
    """The first `limit` bytes of the patch from `since` to `tip` as escaped, highlighted HTML;
    whether it was cut, and the bytes read."""
    lines: list[str] = []
    read, cut = 0, False
    with git_output(repo, "diff", "--no-color", "--no-ext-diff", since, tip) as out:
        for raw, dropped in bounded_lines(out, DIFF_LINE_BYTES):
            if read + len(raw) + dropped + 1 > limit:
                cut = True
                break
            read += len(raw) + dropped + 1
            lines.append(shown_line(raw, dropped, limit=DIFF_LINE_BYTES))
    return highlight_patch(lines, language), cut, read
