"""One task's state machine: analyze → (architect) → implement ⇄ review → integrate.

`TaskPipeline` decides; a `Stages` object does (runs the agents, moves branches). Every
transition is saved in the task's work item before the next stage starts, so a killed
process leaves the task where `--resume` continues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sandbox_runner.console.output import plural
from sandbox_runner.console.shown import one_line
from sandbox_runner.forge.models import AnalysisResult, ArchitectResult, ReviewResult
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.outcomes import WorkStatus

T = TypeVar("T")
STRUCTURED_ATTEMPTS = 2
"""An invalid structured answer is asked for once more, then the task fails."""
_SHOWN_QUESTION = 200  # characters of the Architect's question on fks's line


@dataclass(frozen=True)
class Answered(Generic[T]):
    """What one read-only stage run gave: the validated answer, or why there is none."""

    answer: T | None
    cost_usd: float = 0.0
    problem: str | None = None


@dataclass(frozen=True)
class Implemented:
    commits: int
    cost_usd: float = 0.0
    problem: str | None = None
    """Why the agent run failed (None: it ran; `commits` says whether it did anything)."""


@dataclass(frozen=True)
class Integrated:
    merged: bool
    commit: str | None = None
    conflicts: tuple[str, ...] = ()
    blocked: str | None = None
    in_pr: bool = False
    """Not merged here: its branch went to a pull request (`forge.land: "pr"`)."""


class Stages(Protocol):
    """Runs the stages of one task."""

    def analyze(self, item: WorkItem) -> Answered[AnalysisResult]: ...

    def architect(self, item: WorkItem) -> Answered[ArchitectResult]: ...

    def implement(self, item: WorkItem) -> Implemented: ...

    def review(self, item: WorkItem) -> Answered[ReviewResult]: ...

    def integrate(self, item: WorkItem) -> Integrated:
        """Land the task's branch on the base (one task at a time)."""
        ...

    def restart_on_base(self, item: WorkItem) -> str:
        """Move the task's branch to the base's tip; returns the commit it left behind."""
        ...


class TaskEvents(Protocol):
    """Where the pipeline says what happens (and the forge-tasks database follows)."""

    def stage(self, item: WorkItem, stage: str) -> None: ...

    def info(self, message: str) -> None: ...

    def finished(self, item: WorkItem) -> None:
        """The item reached a rest state: completed, failed, waiting, or pending (budget)."""
        ...

    def reviewed(self, item: WorkItem) -> None:
        """The reviewer gave its verdict (`item.review`)."""
        ...


def rejection(review: ReviewResult) -> str:
    """What Implement is told after the reviewer rejected its work."""
    issues = "\n".join(f"- {issue}" for issue in review.issues) or "- (no reason given)"
    return f"The reviewer rejected the last attempt:\n{issues}"


def prepare_retry(item: WorkItem) -> None:
    """Let a failed (or interrupted) item go on from where it stopped, with fresh retries; a
    rejected implementation goes back to Implement with the review's issues."""
    if item.stage == "review" and item.review is not None and not item.review.approved:
        item.stage, item.feedback = "implement", rejection(item.review)
    item.status, item.error, item.retries, item.pid = WorkStatus.PENDING, None, 0, None


@dataclass
class TaskPipeline:
    item: WorkItem
    store: WorkStore
    stages: Stages
    events: TaskEvents
    max_retries: int = 2
    over_budget: Callable[[], bool] = lambda: False
    budget_note: Callable[[], str] = lambda: "--max-cost reached"
    """Says what the session spent of --max-cost, once `over_budget`."""
    task_over: Callable[[], str | None] = lambda: None
    """Why the task fails for its own budget (--max-task-cost); None while it may go on."""

    def run(self) -> WorkItem:
        """Advance the task until it completes, fails, waits for a human, or the budget ends."""
        item = self.item
        steps: dict[str, Callable[[], WorkStatus | None]] = {
            "analyze": self._analyze,
            "architect": self._architect,
            "implement": self._implement,
            "review": self._review,
            "integrate": self._integrate,
        }
        while True:
            if item.stage == "done":
                return self._rest(WorkStatus.COMPLETED)
            if (why := self.task_over()) is not None:
                return self._rest(self._fail(why))
            if self.over_budget():
                self.events.info(f"{self.budget_note()}: the task stops here, continues next run")
                return self._rest(WorkStatus.PENDING)
            self.events.stage(item, item.stage)
            rest = steps[item.stage]()
            self.store.write(item)
            if rest is not None:
                return self._rest(rest)

    def land(self) -> WorkItem:
        """Only land the approved branch (`fks forge land`): no agent runs, even on conflicts."""
        self.events.stage(self.item, "integrate")
        landed = self.stages.integrate(self.item)
        if landed.merged or landed.in_pr:
            self.item.merge_commit, self.item.stage, self.item.error = landed.commit, "done", None
            return self._rest(WorkStatus.COMPLETED)
        why = landed.blocked or f"conflicts with the base in {', '.join(landed.conflicts)}"
        self.store.write(self.item)
        return self._rest(self._fail(f"could not land: {why}; branch kept"))

    def _rest(self, status: WorkStatus) -> WorkItem:
        if status != WorkStatus.WAITING:
            self.store.release(self.item, status)
        self.events.finished(self.item)
        return self.item

    def _fail(self, why: str) -> WorkStatus:
        if self.over_budget():  # the budget stopped the stage: the task continues next run
            self.events.info(f"{self.budget_note()}: the task stops here, continues next run")
            return WorkStatus.PENDING
        self.item.error = self.task_over() or why
        return WorkStatus.FAILED

    def _ask(self, run: Callable[[WorkItem], Answered[T]], what: str) -> T | str:
        problem = "no answer"
        for attempt in range(1, STRUCTURED_ATTEMPTS + 1):
            answered = run(self.item)
            self.item.cost_usd += answered.cost_usd
            if answered.answer is not None:
                return answered.answer
            problem = answered.problem or "no answer"
            if self.over_budget() or self.task_over() is not None:
                break
            if attempt < STRUCTURED_ATTEMPTS:
                self.events.info(f"{what} gave no valid answer ({problem}); asking once more")
        return f"{what}: {problem}"

    def _analyze(self) -> WorkStatus | None:
        answer = self._ask(self.stages.analyze, "Analyze")
        if isinstance(answer, str):
            return self._fail(answer)
        self.item.analysis = answer
        self.item.stage = "implement" if answer.sufficient else "architect"
        return None

    def _architect(self) -> WorkStatus | None:
        answer = self._ask(self.stages.architect, "Architect")
        if isinstance(answer, str):
            return self._fail(answer)
        if answer.resolved and answer.analysis is not None:
            self.item.analysis = answer.analysis
            self.item.stage = "implement"
            return None
        path = self.store.ask(self.item, answer.question or "")
        # The question is the agent's, of any length and lines: in full in its file.
        question = one_line(answer.question or "", _SHOWN_QUESTION)
        self.events.info(f"Needs a clarification: {question} ({path})")
        return WorkStatus.WAITING

    def _implement(self) -> WorkStatus | None:
        self.item.attempts += 1
        done = self.stages.implement(self.item)
        self.item.cost_usd += done.cost_usd
        if done.problem is not None:
            return self._fail(f"Implement failed: {done.problem}")
        if done.commits == 0:
            return self._fail("Implement made no commit")
        self.item.stage = "review"
        return None

    def _review(self) -> WorkStatus | None:
        answer = self._ask(self.stages.review, "Review")
        if isinstance(answer, str):
            return self._fail(answer)
        self.item.review = answer
        self.events.reviewed(self.item)
        if answer.approved:
            self.item.feedback = None
            self.item.stage = "integrate"
            return None
        return self._send_back(rejection(answer), "rejected")

    def _send_back(self, feedback: str, why: str) -> WorkStatus | None:
        if self.item.retries >= self.max_retries:
            return self._fail(
                f"{why} after {plural(self.item.retries + 1, 'attempt')}; branch kept"
            )
        self.item.retries += 1
        self.item.feedback = feedback
        self.item.stage = "implement"
        self.events.info(f"Back to Implement ({why}; retry {self.item.retries}/{self.max_retries})")
        return None

    def _integrate(self) -> WorkStatus | None:
        landed = self.stages.integrate(self.item)
        if landed.merged or landed.in_pr:
            self.item.merge_commit, self.item.stage, self.item.error = landed.commit, "done", None
            return None
        if landed.blocked:
            return self._fail(
                f"could not land: {landed.blocked}; fks forge land {self.item.task_id} "
                "lands it once that is fixed"
            )
        if self.item.retries >= self.max_retries:
            return self._fail(
                f"conflicts with the base in {', '.join(landed.conflicts)}; branch kept"
            )
        previous = self.stages.restart_on_base(self.item)
        files = ", ".join(landed.conflicts)
        feedback = (
            f"Work that landed meanwhile conflicts with your previous implementation in: {files}. "
            f"The branch now starts from the new base. Your previous implementation is commit "
            f"{previous}: re-apply it on the new base (e.g. `git cherry-pick {previous}`), "
            "resolve the conflicts keeping both changes' intent, and commit."
        )
        return self._send_back(feedback, "conflict on landing")
