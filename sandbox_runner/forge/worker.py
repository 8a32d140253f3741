"""One task, start to rest, in this process: claim its work item, run the pipeline on real
stages, keep the forge-tasks database in step. `fks forge run` starts one such worker process
per task in flight."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_runner.errors import FksError
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.pipeline import TaskPipeline
from sandbox_runner.forge.stages import ForgeContext, TaskStages
from sandbox_runner.forge.work import WorkItem, WorkStore

STAGE_TITLES = {
    "analyze": "Analyze",
    "architect": "Architect",
    "implement": "Implement",
    "review": "Review",
    "integrate": "Integrate",
}


@dataclass
class _Events:
    ctx: ForgeContext
    board: TaskBoard

    def stage(self, item: WorkItem, stage: str) -> None:
        attempt = (
            f" (attempt {item.attempts + 1})" if stage == "implement" and item.attempts else ""
        )
        self.ctx.reporter.info(f"Stage: {STAGE_TITLES.get(stage, stage)}{attempt}")

    def info(self, message: str) -> None:
        self.ctx.reporter.info(message)

    def finished(self, item: WorkItem) -> None:
        reporter = self.ctx.reporter
        cost = f"${item.cost_usd:.4f}"
        if item.status == "completed":
            self.board.set_status(item.task_id, "Done")
            reporter.info(f"Landed on '{item.base}' ({(item.merge_commit or '')[:12]}), {cost}")
        elif item.status == "failed":
            note = f"fks forge: failed: {item.error} (branch {item.branch})"
            self.board.set_status(item.task_id, "Blocked", note)
            reporter.info(f"Failed: {item.error}; branch {item.branch} kept, {cost}")
        elif item.status == "waiting":
            note = f"fks forge: waiting for an answer: {item.question}"
            self.board.set_status(item.task_id, "Blocked", note)
            reporter.info(f'Waiting for an answer: fks forge answer {item.task_id} "..."')
        else:
            reporter.info(f"Stopped at {item.stage} (--max-cost), {cost}")


def process_task(ctx: ForgeContext, task_id: str, *, max_cost: float | None) -> WorkItem | None:
    """Run `task_id` to a rest state; None when another process holds it."""
    board = TaskBoard(ctx.project)
    task = board.text(task_id)
    store = WorkStore(ctx.project)
    item = store.claim(task_id, task.title, session=ctx.session)
    if item is None:
        ctx.reporter.warn(
            f"{task_id} is being processed by another fks forge run, or waits for an answer; skipped"
        )
        return None
    board.set_status(task_id, "In Progress")
    events = _Events(ctx, board)

    def over_budget() -> bool:
        if max_cost is None:
            return False
        spent = sum(i.cost_usd for i in store.items() if i.session == ctx.session)
        return spent >= max_cost

    try:
        with TaskStages(ctx, item, task) as stages:
            pipeline = TaskPipeline(
                item,
                store,
                stages,
                events,
                max_retries=ctx.settings.max_review_retries,
                over_budget=over_budget,
            )
            return pipeline.run()
    except FksError as exc:
        item.error = str(exc)
        store.release(item, "failed")
        events.finished(item)
        raise
