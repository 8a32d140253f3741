"""`fks clean`: remove what finished, failed or killed runs left behind.

Only runs that are provably dead are touched: their fks process is gone. By default only the
runs of this repository (`--all`: of every repository). A dead run's containers are removed;
its workspace volumes are first exported, so the commits (and uncommitted files) its agent
left land on its step branch, then removed. Optionally branches whose work landed or that
hold no commit, and old records.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.backends.docker.target import DeadRun, DeadStep, Leftovers
from sandbox_runner.backends.docker.targets import clean_dead_runs
from sandbox_runner.console.output import plural
from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.forge.work import WorkStore
from sandbox_runner.forge.worktrees import WORKTREES
from sandbox_runner.git.bundles import drop_run_refs
from sandbox_runner.git.repo import branch_exists, leftover_ref, open_repo
from sandbox_runner.git.runner import git, git_common_dir, git_ok
from sandbox_runner.outcomes import Status, WorkStatus
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.places import same_place
from sandbox_runner.records.record import RunRecord, run_alive
from sandbox_runner.records.store import RunStore, project_root


def _running(record: RunRecord | None) -> bool:
    return record is not None and run_alive(record)


@dataclass(frozen=True)
class CleanOptions:
    """`fks clean`'s: what to remove besides what dead runs left running."""

    older_than: float | None = None
    """Also delete run records older than this many days."""
    branches: bool = False
    """Also delete branches whose work landed or that hold no commit of their own."""
    every: bool = False
    """After dead runs of every repository, not only this one."""
    cwd: Path | None = None


def run(options: CleanOptions) -> int:
    if options.older_than is not None and options.older_than < 0:
        raise UsageError("--older-than must be a number of days (0 or more)")
    project = project_root((options.cwd or Path.cwd()).resolve())
    store = RunStore(project)
    records = {r.id: r for r in store.records()}
    repos = _repos_of(project, records)
    removed = clean_dead_runs(_leftovers(records, repos, options.every))
    removed += _clean_legacy_dirs(repos, records)
    removed += _clean_task_worktrees(project)
    if options.branches:
        removed += _clean_branches(records, project)
    if options.older_than is not None:
        removed += _clean_records(store, records, options.older_than)
    print(
        f"fks clean: removed {plural(removed, 'item')}"
        if removed
        else "fks clean: nothing to remove"
    )
    return EXIT_COMPLETE


def _leftovers(records: dict[str, RunRecord], repos: set[str], every: bool) -> Leftovers:
    """What the Docker backend's clean-up is told of the runs: which are alive, and what the
    dead ones' records say it may save and remove."""
    live = frozenset(run_id for run_id, record in records.items() if run_alive(record))
    dead = {run_id: _dead_run(r) for run_id, r in records.items() if run_id not in live}
    return Leftovers(frozenset(repos), every, live, dead, find=_other_run)


def _dead_run(record: RunRecord) -> DeadRun:
    unfinished = tuple(
        DeadStep(step.index, step.agent, step.branch, step.workspace, step.repo)
        for step in record.steps
        if step.workspace and step.branch and step.status != Status.COMPLETE
    )
    repos = frozenset(step.repo for step in record.steps if step.repo)
    return DeadRun(record.id, record.engine, repos, unfinished)


def _other_run(run_id: str, repo: Path) -> DeadRun | None:
    """Run `run_id` as the record in `repo`'s project says (a workspace of another one)."""
    try:
        return _dead_run(RunStore(project_root(repo)).load(run_id))
    except (FksError, OSError):
        return None


def _repos_of(project: Path, records: dict[str, RunRecord]) -> set[str]:
    """The project, as its records spell it; a record naming another repository (one copied
    into this `.forge/`) makes fks clean nothing there."""
    repos = {str(project)}
    for record in records.values():
        repos.update(s.repo for s in record.steps if s.repo and same_place(s.repo, project))
    return repos


def _clean_task_worktrees(project: Path) -> int:
    """`fks forge`'s per-task worktrees that no live process holds (a killed run's)."""
    folder = ForgeLayout(project).root / WORKTREES
    if not folder.is_dir() or folder.is_symlink() or git_common_dir(project) is None:
        return 0
    store = WorkStore(project)
    count = 0
    for entry in sorted(folder.iterdir()):
        item = store.get(entry.name)
        if item is not None and item.held:
            continue
        git(project, "worktree", "remove", "--force", str(entry), check=False)
        shutil.rmtree(entry, ignore_errors=True)
        count += 1
    git(project, "worktree", "prune", check=False)
    return count


def _clean_legacy_dirs(repos: set[str], records: dict[str, RunRecord]) -> int:
    """`.forge/worktrees` and `.forge/sandbox` of runs made by older versions of fks."""
    count = 0
    for repo in (Path(r) for r in repos):
        if not repo.is_dir() or git_common_dir(repo) is None:
            continue
        for folder in ForgeLayout(repo).legacy_dirs:
            if not folder.is_dir() or folder.is_symlink():
                continue
            for entry in sorted(folder.iterdir()):
                if _running(records.get(entry.name)):
                    continue
                if entry.is_symlink() or not entry.is_dir():
                    entry.unlink()
                else:
                    shutil.rmtree(entry, ignore_errors=True)
                print(f"removed {entry}")
                count += 1
        git(repo, "worktree", "prune", check=False)
    return count


def _clean_branches(records: dict[str, RunRecord], project: Path) -> int:
    """Delete the step branches of finished runs, and forge task branches of finished tasks,
    whose work landed on their base or that hold no commit of their own; never one with work
    that did not land."""
    count = 0
    for record in records.values():
        if _running(record):
            continue
        repos: set[Path] = set()
        for step in record.steps:
            if step.branch and step.base_branch and same_place(step.repo, project):
                repo = project
                repos.add(repo)
                if not git_ok(
                    repo, "rev-parse", "--verify", "--quiet", leftover_ref(record.id, step.index)
                ):
                    count += _drop_if_done(repo, step.branch, step.base_branch, step.start_commit)
        for repo in repos:
            gone = all(
                not branch_exists(repo, s.branch)
                for s in record.steps
                if s.branch and same_place(s.repo, repo)
            )
            if gone:  # the run's hidden refs go with its last branch
                drop_run_refs(open_repo(repo, what="fks clean"), record.id)
    return count + _clean_task_branches(project)


def _clean_task_branches(project: Path) -> int:
    try:
        items = WorkStore(project).items()
    except FksError as exc:
        print(f"warning: forge task branches not cleaned: {exc}")
        return 0
    return sum(
        _drop_if_done(project, item.branch, item.base, item.start_commit)
        for item in items
        if item.branch and item.base and item.status in (WorkStatus.COMPLETED, WorkStatus.FAILED)
    )


def _drop_if_done(repo: Path, branch: str, base: str, start: str | None) -> int:
    """Delete `branch` if its work is all on `base` or it holds no commit (1), else keep it (0)."""
    if not repo.is_dir() or not branch_exists(repo, branch):
        return 0
    tip = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    if start is not None and tip == start:
        why = "it holds no commit of its own"
    elif branch_exists(repo, base) and git_ok(
        repo, "merge-base", "--is-ancestor", tip, f"refs/heads/{base}"
    ):
        why = f"its work is on {base}"
    else:
        return 0  # work that did not land: keep it
    # Deleted only if it still points where it was checked (old value given to update-ref).
    if not git_ok(repo, "update-ref", "-d", f"refs/heads/{branch}", tip):
        return 0
    print(f"deleted branch {branch} ({why})")
    return 1


def _clean_records(store: RunStore, records: dict[str, RunRecord], days: float) -> int:
    cutoff = time.time() - days * 86400
    count = 0
    for run_id, record in records.items():
        if _running(record) or record.started.timestamp() >= cutoff:
            continue
        shutil.rmtree(store.run_dir(run_id), ignore_errors=True)
        print(f"deleted run record {run_id}")
        count += 1
    return count
