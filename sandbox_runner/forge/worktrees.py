"""A forge task's git worktree: where its stages run when it has no sandbox, on its branch,
removed when the task leaves the process."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from sandbox_runner.forge.work import WorkItem
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import git
from sandbox_runner.records.layout import ForgeLayout

WORKTREES = "task-worktrees"


@contextlib.contextmanager
def task_worktree(repo: Repo, item: WorkItem) -> Iterator[Path]:
    """A git worktree on the task's branch, removed when the task leaves this process."""
    assert item.branch is not None
    path = ForgeLayout(repo.top).root / WORKTREES / item.task_id
    git(repo.top, "worktree", "prune")
    if path.exists():
        git(repo.top, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo.top, "worktree", "add", "-q", str(path), item.branch)
    try:
        yield path
    finally:
        git(repo.top, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
        git(repo.top, "worktree", "prune", check=False)
