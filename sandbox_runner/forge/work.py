"""`.forge/work/<task-id>-<NNN>.yaml`: where each task is in the pipeline. Its `status` is also
the lock: a worker claims a task (`forge.worker.claim`) by turning it `executing` with its pid,
under an flock, so two `fks forge run` at once never process the same task; a dead owner's claim
is taken over."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from sandbox_runner.bounded import load_yaml
from sandbox_runner.console.units import usd
from sandbox_runner.docstrings import described
from sandbox_runner.errors import FksError
from sandbox_runner.forge.models import AnalysisResult, ReviewResult
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.paths import write_atomic
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.lock import waiting_lock
from sandbox_runner.records.record import PullRecord, now
from sandbox_runner.signals import pid_alive

Stage = Literal["analyze", "architect", "implement", "review", "integrate", "done"]
WORK_ITEM_BYTES = 4 << 20
"""Bytes of one work item read at most (fks writes a few KiB: answers are bounded)."""
_NAME = re.compile(r"^(?P<task>.+)-(?P<seq>\d{3,})\.yaml$")


class WorkItem(BaseModel):
    """One task's way through the pipeline."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=described())

    task_id: str
    seq: int = 1
    """NNN of the file name: a task processed again after it failed gets a new item."""
    title: str = ""
    status: WorkStatus = WorkStatus.PENDING
    """pending → executing → completed/failed; waiting: for the answer to `question`;
    interrupted: stopped by a signal (an `executing` item whose process is gone is one too)."""
    stage: Stage = "analyze"
    """The next (or current) stage."""
    pid: int | None = None
    """The process that holds the task while it is executing."""
    analysis: AnalysisResult | None = None
    review: ReviewResult | None = None
    """The last review."""
    feedback: str | None = None
    """What the next Implement must address (review issues or a merge conflict)."""
    question: str | None = None
    answer: str | None = None
    attempts: int = 0
    """Implement attempts so far."""
    retries: int = 0
    """Times the task was sent back to Implement (rejected, or conflicting on landing)."""
    branch: str | None = None
    base: str | None = None
    start_commit: str | None = None
    """The base commit the task's branch started from (its latest start, after a conflict)."""
    merge_commit: str | None = None
    cost_usd: float = 0.0
    runs: list[str] = Field(default_factory=list)
    """The run records of this task's stages (`fks show RUN`)."""
    session: str | None = None
    """The `fks forge run` that last processed it (for --max-cost across its tasks)."""
    session_start_cost: float = 0.0
    """`cost_usd` when `session` took it: what that run spent on it is the rest."""
    error: str | None = None
    pr: PullRecord | None = None
    """Its pull request (`forge.land: "pr"`), or why it was not opened."""
    updated: datetime = Field(default_factory=now)

    @property
    def file_name(self) -> str:
        return f"{self.task_id}-{self.seq:03d}.yaml"

    @property
    def session_cost(self) -> float:
        """What its last `fks forge run` (`session`) spent on it; `cost_usd` is all runs'."""
        return self.cost_usd - self.session_start_cost

    def cost_text(self, session: str) -> str:
        """What it cost, `$0.0300`; `$0.0100 this run ($0.0300 in all)` when runs before
        `session` spent on it too."""
        spent = self.session_cost if self.session == session else 0.0
        if spent >= self.cost_usd:
            return usd(self.cost_usd)
        return f"{usd(spent)} this run ({usd(self.cost_usd)} in all)"

    @property
    def held(self) -> bool:
        """Another live process is processing it."""
        return self.status == WorkStatus.EXECUTING and self.pid is not None and pid_alive(self.pid)

    @property
    def interrupted(self) -> bool:
        return self.status == WorkStatus.INTERRUPTED or (
            self.status == WorkStatus.EXECUTING and not self.held
        )

    @property
    def shown_status(self) -> WorkStatus:
        """The status as users see it: a dead owner's `executing` is `interrupted`, a completed
        task in a pull request `in_pr`."""
        if self.status == WorkStatus.COMPLETED and self.pr is not None and self.pr.url:
            return WorkStatus.IN_PR
        return WorkStatus.INTERRUPTED if self.interrupted else self.status

    @property
    def state(self) -> str:
        """Where it stands, in words: `landed`, `failed at implement`, `waiting for an answer`."""
        return describe(self.shown_status, self.stage, answered=bool(self.answer))

    @property
    def landed(self) -> bool:
        """Its work was merged into the base (its last run has landed: `records.landed`)."""
        return self.status == WorkStatus.COMPLETED and self.merge_commit is not None

    @property
    def landable(self) -> bool:
        """Approved, but its landing failed: the next run lands it without new agent runs."""
        return self.status == WorkStatus.FAILED and self.stage == "integrate"

    @property
    def continues(self) -> bool:
        """The next run continues this item where it stopped (rather than starting anew)."""
        return (
            self.status == WorkStatus.PENDING
            or self.interrupted
            or self.landable
            or (self.status == WorkStatus.WAITING and bool(self.answer))
        )

    @property
    def waiting_for(self) -> str | None:
        if self.shown_status == WorkStatus.IN_PR and self.pr is not None:
            return f"review of pull request {self.pr.url}"
        if self.status == WorkStatus.WAITING:
            return "an answer (fks forge answer)" if not self.answer else "the next fks forge run"
        if self.interrupted:
            return "fks forge run --resume continues it"
        if self.landable:
            return f"approved, not landed: {self.error}"
        return None


def describe(status: WorkStatus, stage: str, *, answered: bool = False) -> str:
    """A work item's status and stage in words (a landed task is not "completed at done")."""
    if status == WorkStatus.COMPLETED:
        return "landed"
    if status == WorkStatus.IN_PR:
        return "in a pull request"
    if status == WorkStatus.WAITING:
        return "answered, the next run goes on" if answered else "waiting for an answer"
    if status == WorkStatus.EXECUTING:
        return f"running: {stage}"
    return f"{status} at {stage}"


class WorkStore:
    """The work items of one project."""

    def __init__(self, project: Path) -> None:
        layout = ForgeLayout(project)
        self.dir = layout.root / "work"
        self.clarifications = layout.root / "clarifications"
        self._lock = layout.lock("forge-work")

    def locked(self) -> AbstractContextManager[None]:
        return waiting_lock(self._lock)

    def items(self) -> list[WorkItem]:
        """The newest item of every task."""
        newest: dict[str, WorkItem] = {}
        for item in self._all():
            if item.task_id not in newest or item.seq > newest[item.task_id].seq:
                newest[item.task_id] = item
        return sorted(newest.values(), key=lambda i: i.task_id)

    def get(self, task_id: str) -> WorkItem | None:
        return next((i for i in self.items() if i.task_id == task_id), None)

    def _all(self) -> Iterator[WorkItem]:
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.yaml")):
            if _NAME.match(path.name):
                yield self._load(path)

    def _load(self, path: Path) -> WorkItem:
        try:
            with path.open("rb") as handle:
                data = handle.read(WORK_ITEM_BYTES + 1)
            return WorkItem.model_validate(load_yaml(data, max_bytes=WORK_ITEM_BYTES))
        except (OSError, ValueError, yaml.YAMLError) as exc:  # ValidationError is a ValueError
            raise FksError(
                f"{path} is not a valid forge work item ({str(exc).splitlines()[0]}); "
                "fix or delete it"
            ) from None

    def write(self, item: WorkItem) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        item.updated = now()
        data = item.model_dump(mode="json", exclude_none=True)
        write_atomic(self.dir / item.file_name, yaml.safe_dump(data, sort_keys=False))

    def history(self, task_id: str) -> list[WorkItem]:
        """Every item of `task_id`, oldest first."""
        return sorted((i for i in self._all() if i.task_id == task_id), key=lambda i: i.seq)

    def hold(self, item: WorkItem | None, task_id: str, title: str, *, session: str) -> WorkItem:
        """Under `locked()`: hold `item` for this process, or a new item when it is None."""
        if item is None:
            newest = self.get(task_id)
            item = WorkItem(task_id=task_id, seq=newest.seq + 1 if newest else 1, title=title)
        if item.session != session:
            item.session_start_cost = item.cost_usd
        item.status, item.pid, item.session = WorkStatus.EXECUTING, os.getpid(), session
        self.write(item)
        return item

    def release(self, item: WorkItem, status: WorkStatus) -> None:
        item.status, item.pid = status, None
        self.write(item)

    def ask(self, item: WorkItem, question: str) -> Path:
        """Queue `question` for a human: `.forge/clarifications/<task-id>.md`."""
        self.clarifications.mkdir(parents=True, exist_ok=True)
        path = self.clarifications / f"{item.task_id}.md"
        text = f"# {item.task_id}: {item.title}\n\n## Question\n\n{question.strip()}\n"
        write_atomic(path, text)
        item.question, item.answer, item.stage = question, None, "architect"
        self.release(item, WorkStatus.WAITING)
        return path

    def record_answer(self, task_id: str, answer: str) -> WorkItem:
        with self.locked():
            item = self.get(task_id)
            if item is None or item.status != WorkStatus.WAITING:
                raise FksError(
                    f"{task_id} has no open question; 'fks forge clarifications' lists them"
                )
            item.answer = answer.strip()
            self.write(item)
        path = self.clarifications / f"{task_id}.md"
        with contextlib.suppress(OSError):
            question = path.read_text(encoding="utf-8").rstrip()
            write_atomic(path, f"{question}\n\n## Answer\n\n{item.answer}\n")
        return item
