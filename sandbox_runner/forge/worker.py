"""One task, start to rest, in this process: claim its work item, run the pipeline on real
stages, keep the forge-tasks database in step. `fks forge run` starts one such worker process
per task in flight; `fks forge land` runs one in its own process.

Whether a task is still to be processed is decided when it is claimed, under the work items'
lock, so two `fks forge run` at once never process one task twice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sandbox_runner.errors import FksError, Interrupted, SandboxError
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.budget import TaskBudget
from sandbox_runner.forge.pipeline import TaskPipeline
from sandbox_runner.forge.stages import ForgeContext, TaskStages
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.notify import events as notify_events
from sandbox_runner.outcomes import WorkStatus

STAGE_TITLES = {
    "analyze": "Analyze",
    "architect": "Architect",
    "implement": "Implement",
    "review": "Review",
    "integrate": "Integrate",
    "done": "Done",
}

Mode = Literal["ready", "named", "force", "land"]
"""How the task was chosen: from the ready list, named by the user, named with --force (start
anew whatever its state), or to be landed only (`fks forge land`)."""


@dataclass
class _Events:
    ctx: ForgeContext
    board: TaskBoard
    stages: TaskStages | None = None
    """Whose run record keeps the deliveries of the task's notifications."""

    def stage(self, item: WorkItem, stage: str) -> None:
        attempt = (
            f" (attempt {item.attempts + 1})" if stage == "implement" and item.attempts else ""
        )
        self.ctx.reporter.info(f"Stage: {STAGE_TITLES.get(stage, stage)}{attempt}")

    def info(self, message: str) -> None:
        self.ctx.reporter.info(message)

    def finished(self, item: WorkItem) -> None:
        reporter = self.ctx.reporter
        cost = item.cost_text(self.ctx.session)
        if item.shown_status == WorkStatus.IN_PR and item.pr is not None:
            note = f"fks forge: in pull request {item.pr.url}"
            self.board.set_status(item.task_id, "In Progress", note)
            reporter.info(f"In pull request #{item.pr.number}: {item.pr.url}, {cost}")
            if item.pr.url:
                notify_events.pull_request(
                    self.ctx.notifier,
                    self.stages.active_run if self.stages else None,
                    url=item.pr.url,
                    title=f"{item.task_id}: {item.title}",
                    say=reporter.warn,
                )
        elif item.status == WorkStatus.COMPLETED:
            self.board.set_status(item.task_id, "Done")
            reporter.info(f"Landed on '{item.base}' ({(item.merge_commit or '')[:12]}), {cost}")
        elif item.status == WorkStatus.FAILED:
            note = f"fks forge: failed: {item.error} (branch {item.branch})"
            self.board.set_status(item.task_id, "Blocked", note)
            why = (item.error or "").removesuffix("; branch kept")
            reporter.info(f"Failed: {why}; branch {item.branch} kept, {cost}")
        elif item.status == WorkStatus.WAITING:
            note = f"fks forge: waiting for an answer: {item.question}"
            self.board.set_status(item.task_id, "Blocked", note)
            reporter.info(f'Waiting for an answer: fks forge answer {item.task_id} "..."')
            self._ask(item)
        elif item.status == WorkStatus.INTERRUPTED:
            reporter.info(f"Interrupted during {STAGE_TITLES[item.stage]}, {cost}")
        else:
            reporter.info(f"Stopped at {item.stage} (--max-cost), {cost}")
        notify_events.task_ended(
            self.ctx.notifier,
            self.stages.active_run if self.stages else None,
            task=(item.task_id, item.title),
            status=item.status,
            why=(item.error or "") if item.status == WorkStatus.FAILED else "",
            cost=cost,
            project=self.ctx.project,
            say=reporter.warn,
        )

    def reviewed(self, item: WorkItem) -> None:
        review = item.review
        if review is None:
            return
        notify_events.review(
            self.ctx.notifier,
            self.stages.active_run if self.stages else None,
            task_id=item.task_id,
            title=item.title,
            approved=review.approved,
            issues=review.issues,
            cost_usd=item.cost_usd,
            say=self.ctx.reporter.warn,
        )

    def _ask(self, item: WorkItem) -> None:
        notify_events.question(
            self.ctx.notifier,
            self.stages.active_run if self.stages else None,
            task_id=item.task_id,
            text=item.question or "",
            project=self.ctx.project,
            say=self.ctx.reporter.warn,
        )


def landed_line(item: WorkItem) -> str:
    if item.pr is not None and item.pr.url:
        return (
            f"{item.task_id} is in pull request {item.pr.url}; "
            f"fks forge run --force {item.task_id} processes it again"
        )
    return (
        f"{item.task_id} already landed on '{item.base}' ({(item.merge_commit or '?')[:12]}); "
        f"fks forge run --force {item.task_id} processes it again"
    )


def refusal(board: TaskBoard, item: WorkItem | None, task_id: str, mode: Mode) -> str | None:
    """Why `task_id` must not be claimed now (None: it may)."""
    if item is not None and item.held:
        return f"{task_id} is being processed by another fks forge run (pid {item.pid}); skipped"
    if mode == "force":
        return None
    if item is not None and item.status == WorkStatus.WAITING and not item.answer:
        return f'{task_id} waits for an answer (fks forge answer {task_id} "..."); skipped'
    if item is not None and item.status == WorkStatus.COMPLETED:
        return landed_line(item)
    if mode == "land":
        if item is not None and item.stage == "integrate" and item.continues:
            return None
        where = f"it is {item.shown_status} at {item.stage}" if item else "it has not been run"
        return f"{task_id} has no approved branch to land ({where}); fks forge run {task_id} processes it"
    if item is not None and item.continues:
        return None
    if mode == "ready" and task_id not in board.ready():
        status = board.task(task_id).meta.status
        return f"{task_id} is no longer ready (it is {status} in forge-tasks); skipped"
    return None


def claim(ctx: ForgeContext, task_id: str, title: str, mode: Mode) -> WorkItem | str:
    """Hold `task_id` for this process (or say why not), deciding under the work items' lock."""
    board, store = TaskBoard(ctx.project), WorkStore(ctx.project)
    with store.locked():
        item = store.get(task_id)
        why = refusal(board, item, task_id, mode)
        if why is not None:
            return why
        keep = item if item is not None and item.continues and mode != "force" else None
        held = store.hold(keep, task_id, title, session=ctx.session)
        board.set_status(task_id, "In Progress")
        return held


def process_task(
    ctx: ForgeContext, task_id: str, *, max_cost: float | None, mode: Mode = "named"
) -> WorkItem | None:
    """Run `task_id` to a rest state; None when it is not to be processed (the reason shown)."""
    board = TaskBoard(ctx.project)
    task = board.text(task_id)
    store = WorkStore(ctx.project)
    item = claim(ctx, task_id, task.title, mode)
    if isinstance(item, str):
        ctx.reporter.warn(item)
        return None
    events = _Events(ctx, board)

    budget = TaskBudget(store, ctx.session, item, max_cost, ctx.max_task_cost)
    try:
        with TaskStages(ctx, item, task, budget=budget.tightest) as stages:
            events.stages = stages
            pipeline = TaskPipeline(
                item,
                store,
                stages,
                events,
                max_retries=ctx.settings.max_review_retries,
                over_budget=budget.session_over,
                budget_note=budget.session_note,
                task_over=budget.task_over,
            )
            return pipeline.land() if mode == "land" else pipeline.run()
    except (Interrupted, KeyboardInterrupt) as exc:
        name = getattr(exc, "signal_name", "SIGINT")
        _rest(store, events, item, WorkStatus.INTERRUPTED, f"interrupted ({name})")
        raise
    except FksError as exc:
        _rest(store, events, item, WorkStatus.FAILED, str(exc))
        raise
    except Exception as exc:
        why = _unexpected(exc, item)
        _rest(store, events, item, WorkStatus.FAILED, why)
        if why.startswith("Docker"):
            raise SandboxError(
                f"{task_id}: {why}; the task is marked failed (fks forge retry {task_id} "
                "continues it)"
            ) from None
        raise


def _rest(store: WorkStore, events: _Events, item: WorkItem, status: WorkStatus, why: str) -> None:
    item.error = why
    store.release(item, status)
    events.finished(item)


def _unexpected(exc: Exception, item: WorkItem) -> str:
    """One line for an error nobody expected; Docker's (the daemon died, a container vanished)
    are named as such."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    stage = STAGE_TITLES.get(item.stage, item.stage)
    root = type(exc).__module__.split(".")[0]
    if root in ("docker", "requests", "urllib3"):
        return f"Docker error during {stage}: {text}"
    return f"{type(exc).__name__} during {stage}: {text}"
