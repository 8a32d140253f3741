"""Landing a finished step: merging its branch into the base branch (merge-tree, then a
fast-forward) without ever leaving the base half-merged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sandbox_runner.git.limits import MergeLimits, measure
from sandbox_runner.git.repo import Repo, checkout_of, rev
from sandbox_runner.git.runner import GitError, git, git_ok, run_git
from sandbox_runner.records.layout import ForgeLayout

# Conflicting paths beyond the first 64 KiB of their names are not listed.
_MAX_CONFLICT_LIST = 64 * 1024


@dataclass(frozen=True)
class Landing:
    """The result of merging a step branch into its base."""

    merged: bool
    commit: str | None = None
    """The base branch's new tip (or its unchanged tip when there was nothing to merge)."""
    fast_forward: bool = False
    conflicts: Sequence[str] = ()
    blocked: str | None = None
    """Why the base could not be updated (e.g. untracked files would be overwritten)."""
    nothing_new: bool = False
    """The base already had every commit of the step."""


def merge_back(repo: Repo, base: str, branch: str, message: str, env: Mapping[str, str]) -> Landing:
    """Merge `branch` into `base` without ever leaving the base half-merged.

    The merge is computed with `git merge-tree` (no work tree involved); the base then moves by
    a fast-forward, which in a checked-out base updates the user's files the way
    `git merge --ff-only` does: refusing rather than touching anything uncommitted. Before
    that, what the merge would write is measured from git's objects against `MergeLimits`
    (files, bytes, path depth) and for `.forge/` paths: either leaves the base untouched.
    """
    base_tip = rev(repo, base)
    step_tip = rev(repo, branch)
    if git_ok(repo.top, "merge-base", "--is-ancestor", step_tip, base_tip):
        return Landing(merged=True, commit=base_tip, nothing_new=True)
    if not git_ok(repo.top, "merge-base", base_tip, step_tip):
        return Landing(
            merged=False,
            blocked=f"{branch} shares no history with '{base}' (it was replaced); review it and merge by hand",
        )
    fast_forward = git_ok(repo.top, "merge-base", "--is-ancestor", base_tip, step_tip)
    merged = step_tip if fast_forward else _merge_commit(repo, base_tip, step_tip, message, env)
    if isinstance(merged, Landing):
        return merged
    records = ForgeLayout(repo.top).root.name
    measured = measure(repo, base_tip, merged, MergeLimits.from_env(), records)
    if measured.over:
        return Landing(merged=False, blocked=measured.over)
    owned = measured.owned
    if owned:
        return Landing(
            merged=False,
            blocked=f"it changes {owned[0]}{' and more' if len(owned) > 1 else ''}, and {records}/ "
            "holds fks's run records (a merge would replace them); review the branch and merge by hand",
        )
    return _move_base(repo, base, base_tip, merged, message, env, fast_forward=fast_forward)


def _merge_commit(
    repo: Repo, base_tip: str, step_tip: str, message: str, env: Mapping[str, str]
) -> str | Landing:
    """The merge commit of the two tips, computed by `git merge-tree` with no work tree;
    the conflicting paths' `Landing` when they do not merge cleanly.
    """
    done = run_git(
        repo.top,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        base_tip,
        step_tip,
        limit=_MAX_CONFLICT_LIST,
    )
    lines = done.stdout[:_MAX_CONFLICT_LIST].decode(errors="replace").strip().splitlines()
    if len(done.stdout) > _MAX_CONFLICT_LIST:
        lines = lines[:-1]  # cut short: its last name may be too
    if done.returncode == 1:
        return Landing(merged=False, conflicts=sorted(set(lines[1:])))
    if done.returncode != 0 or not lines:
        raise GitError(
            f"git merge-tree failed (exit {done.returncode}): {done.stderr.decode().strip()}"
        )
    tree = lines[0]
    return git(
        repo.top, "commit-tree", tree, "-p", base_tip, "-p", step_tip, "-m", message, env=env
    )


def _move_base(
    repo: Repo,
    base: str,
    base_tip: str,
    new: str,
    message: str,
    env: Mapping[str, str],
    *,
    fast_forward: bool,
) -> Landing:
    """Fast-forward `base` to `new`: its ref alone, or through its checkout when it has one."""
    checkout = checkout_of(repo, base)
    if checkout is None:
        git(repo.top, "update-ref", "-m", f"fks: {message}", f"refs/heads/{base}", new, base_tip)
        return Landing(merged=True, commit=new, fast_forward=fast_forward)
    try:
        git(checkout, "merge", "-q", "--ff-only", "--no-edit", new, env=env)
    except GitError as exc:
        return Landing(merged=False, blocked=str(exc))
    return Landing(merged=True, commit=new, fast_forward=fast_forward)
