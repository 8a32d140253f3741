"""What a task may still spend: the session's `--max-cost` across all its tasks and the task's
own `--max-task-cost` (forge.maxTaskCost); the tighter one is what each stage gets."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.steps.guards import Budget


@dataclass
class TaskBudget:
    store: WorkStore
    session: str
    item: WorkItem
    max_cost: float | None = None
    max_task_cost: float | None = None

    def session_spent(self) -> float:
        """What this `fks forge run` spent on all its tasks (not what earlier runs spent on them)."""
        others = sum(
            i.session_cost
            for i in self.store.items()
            if i.session == self.session and i.task_id != self.item.task_id
        )
        return others + self.item.session_cost

    def tightest(self) -> Budget | None:
        """The budget with the least left (None: no limit); a stage gets it as its budget."""
        budgets = []
        if self.max_cost is not None:
            budgets.append(Budget(self.max_cost, self.session_spent(), "--max-cost"))
        if self.max_task_cost is not None:
            budgets.append(Budget(self.max_task_cost, self.item.cost_usd, "--max-task-cost"))
        return min(budgets, key=lambda b: b.left, default=None)

    def session_over(self) -> bool:
        return self.max_cost is not None and self.session_spent() >= self.max_cost

    def session_note(self) -> str:
        assert self.max_cost is not None
        return Budget(self.max_cost, 0.0).stopped(self.session_spent())

    def task_over(self) -> str | None:
        """Why the task fails for its own budget (None: it may go on)."""
        limit = self.max_task_cost
        if limit is None or self.item.cost_usd < limit:
            return None
        stopped = Budget(limit, 0.0, "--max-task-cost").stopped(self.item.cost_usd)
        return f"{stopped}; raise --max-task-cost (forge.maxTaskCost) to let it go on"
