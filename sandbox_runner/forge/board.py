"""The forge-tasks database as `fks forge` uses it: which tasks are ready, what each says, and
their status as they move (In Progress, Done, Blocked with the reason in the notes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.errors import FksError, UsageError
from sandbox_runner.forge.prompts import TaskText
from sandbox_runner.records.record import now
from sandbox_runner.tasks import ids
from sandbox_runner.tasks.errors import TaskError
from sandbox_runner.tasks.model import Status, Task
from sandbox_runner.tasks.store import Board, TaskStore


@dataclass(frozen=True)
class TaskBoard:
    """`forge/tasks/` of the project."""

    project: Path

    def _store(self) -> TaskStore:
        try:
            return TaskStore(self.project)
        except TaskError as exc:
            raise FksError(str(exc)) from None

    def _board(self) -> Board:
        return self._store().load()

    def problems(self, board: Board | None = None) -> list[str]:
        """One line per task file that cannot be read (its task is skipped, the others run), of
        `board` when it is already loaded."""
        import unicodedata

        def shown(text: str) -> str:  # file names are the agent's: no escapes, no bidi controls
            text = strip_escapes(text, keep="")
            return "".join(c for c in text if unicodedata.category(c) != "Cf")[:300]

        return [
            f"{shown(problem)}; skipped - fix the task file (forge-tasks view checks it)"
            for problem in (board or self._board()).problems
        ]

    def task(self, task_id: str) -> Task:
        found = [tf.task for tf in self._board().tasks if tf.task.id == task_id]
        if not found:
            raise UsageError(f"no task {task_id} in {self.project / 'forge' / 'tasks'}")
        return found[0]

    def text(self, task_id: str) -> TaskText:
        task = self.task(task_id)
        return TaskText(
            id=task.id,
            title=task.meta.title,
            description=task.description,
            criteria=tuple(c.text for c in task.acceptance_criteria),
        )

    def ready(self) -> list[str]:
        """To Do tasks whose dependencies are all Done, high priority first, then oldest."""
        board = self._board()
        status = {tf.task.id: tf.task.meta.status for tf in board.tasks}
        order = {"high": 0, "medium": 1, "low": 2}
        ready = [
            tf.task
            for tf in board.tasks
            if tf.task.meta.status == "To Do"
            and all(status.get(dep) == "Done" for dep in tf.task.meta.dependencies)
        ]
        ready.sort(key=lambda t: (order.get(t.meta.priority, 1), t.meta.created, t.id))
        return [t.id for t in ready]

    def normalize(self, ref: str) -> str:
        try:
            return ids.normalize(ref)
        except TaskError as exc:
            raise UsageError(str(exc)) from None

    def set_status(self, task_id: str, status: Status, note: str | None = None) -> None:
        """Move the task (and append `note` to its notes)."""
        store = self._store()
        with store.locked():
            for tf in store.load().tasks:
                if tf.task.id != task_id:
                    continue
                notes = tf.task.notes
                if note:
                    notes = f"{notes}\n\n{note}".strip()
                meta = tf.task.meta.model_copy(update={"status": status, "updated": now()})
                store.write(tf.path, tf.task.model_copy(update={"meta": meta, "notes": notes}))
