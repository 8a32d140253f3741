"""Which tasks `fks forge run` takes (named, or ready when a place frees up), the base branch
it lands them on, and that branch's lock it holds meanwhile."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

from sandbox_runner.errors import UsageError
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.work import WorkStore
from sandbox_runner.forge.worker import landed_line
from sandbox_runner.git.repo import (
    branch_exists,
    checkout_of,
    current_branch,
    dirty_outside_tasks,
    open_repo,
)
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.records.lock import run_lock


def ready_tasks(project: Path, resume: bool) -> list[str]:
    """What `fks forge run` without TASKs processes now: items that go on (answered, stopped by
    --max-cost, approved but not landed, with --resume the interrupted), then the ready tasks."""
    chosen = TaskBoard(project).ready()
    for item in WorkStore(project).items():
        again = (
            (item.status == WorkStatus.WAITING and item.answer)
            or item.status == WorkStatus.PENDING
            or item.landable
            or (resume and item.interrupted)
        )
        if again and not item.held and item.task_id not in chosen:
            chosen.insert(0, item.task_id)
    return chosen


def named_tasks(project: Path, refs: Sequence[str], *, force: bool) -> list[str]:
    """The TASKs the user named; a landed one is refused unless --force."""
    board, store = TaskBoard(project), WorkStore(project)
    wanted = list(dict.fromkeys(board.normalize(ref) for ref in refs))
    for task_id in wanted:
        status = board.task(task_id).meta.status
        item = store.get(task_id)
        if force:
            continue
        if item is not None and item.status == WorkStatus.COMPLETED:
            raise UsageError(landed_line(item))
        if item is None and status == "Done":
            raise UsageError(
                f"{task_id} is Done in forge-tasks; fks forge run --force {task_id} processes it"
            )
    return wanted


def picker(
    project: Path, named: Sequence[str], *, resume: bool
) -> Callable[[Sequence[str]], str | None]:
    """The conductor's next task: the next named one, or what is ready at that moment."""

    def pick(started: Sequence[str]) -> str | None:
        tasks = named or ready_tasks(project, resume)
        return next((t for t in tasks if t not in started), None)

    return pick


def forge_lock(project: Path, base: str, session: str) -> AbstractContextManager[object]:
    """Held while fks forge lands on `base`: shared by `fks forge` runs, which claim their tasks
    one by one, and exclusive of chains on `base` (and of in-place runs in its checkout)."""
    stack = ExitStack()
    with stack:
        label = "fks forge run"
        stack.enter_context(run_lock(project, base, run_label=label, shared=True)).set_run(session)
        checkout = checkout_of(open_repo(project, what="fks forge"), base)
        if checkout is not None and checkout.resolve() == project.resolve():
            in_place = run_lock(project, None, run_label=label, shared=True)
            stack.enter_context(in_place).set_run(session)
        return stack.pop_all()


def forge_base(project: Path, base: str | None) -> str:
    """--base, else the checked-out branch; tracked changes outside forge/tasks/ are refused."""
    repo = open_repo(project, what="fks forge")
    if base is None:
        base = current_branch(project)
        if base is None:
            raise UsageError(
                f"HEAD is detached in {project}; check out a branch or pass --base BRANCH"
            )
    elif not branch_exists(project, base):
        raise UsageError(f"--base {base}: no such branch in {project}")
    checkout = checkout_of(repo, base)
    dirty = dirty_outside_tasks(checkout) if checkout else []
    if dirty:
        raise UsageError(
            f"uncommitted changes to tracked files in {checkout} ({', '.join(dirty[:5])}); "
            f"commit or stash them first - fks forge lands approved tasks on '{base}' there"
        )
    return base
