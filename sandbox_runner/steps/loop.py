"""The iteration loop of one step: run the agent until it prints the marker or a limit is hit.

tenacity drives it: one attempt = one iteration, retried while incomplete, stopped after N
iterations, by the no-progress/repeated-error breakers, or by the cost budget. A second,
inner tenacity loop backs off from rate-limit answers without using up iterations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_exponential

from sandbox_runner.backends.api import ExecResult, ExecSpec, Execution, Sandbox
from sandbox_runner.console.units import byte_limit
from sandbox_runner.errors import AgentNotFoundError
from sandbox_runner.outcomes import (
    CUT_OFF,
    ENDS_A_STEP_WITHOUT_N,
    RAN_OUT,
    STOPS_THE_STEP,
    IterationEnd,
    Reason,
    StepEnd,
    stops_step_as,
)
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.record import IterationRecord, StepRecord, now
from sandbox_runner.records.store import ActiveRun, RecordWriter
from sandbox_runner.results.ended import IterationResult, StepOutcome
from sandbox_runner.results.reported import ClaudeStats
from sandbox_runner.steps.endings import Seen, alike, claude_stats, ending, with_metered
from sandbox_runner.steps.guards import DEFAULT_STALL_TIMEOUT, Budget, Guard
from sandbox_runner.steps.launch import (
    Asked,
    cli_home,
    iteration_guard,
    iteration_spec,
    monitor_cost,
    monitor_for,
    monitor_progress,
)
from sandbox_runner.steps.marker import Monitor, StreamJsonMonitor
from sandbox_runner.steps.reporter import Reporter
from sandbox_runner.steps.tap import LogLimits, OutputTap

if TYPE_CHECKING:
    from sandbox_runner.agentclis.events import Result

DEFAULT_NO_PROGRESS_LIMIT = 3
DEFAULT_RATE_LIMIT_MAX_WAIT = 900.0


@dataclass
class StepContext:
    """Everything one step's loop needs."""

    step: Step
    agent: AgentCommand
    prompt: PromptSource
    sandbox: Sandbox
    reporter: Reporter
    record: StepRecord
    run: ActiveRun | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    secrets: Sequence[str] = ()
    progress: Callable[[], str | None] | None = None
    """Returns a fingerprint of the workspace (HEAD + files); None when it cannot tell."""
    no_progress_limit: int = DEFAULT_NO_PROGRESS_LIMIT
    rate_limit_max_wait: float = DEFAULT_RATE_LIMIT_MAX_WAIT
    rate_limit_min_wait: float = 5.0
    """First back-off wait after a rate-limit answer (it doubles, up to 300 s)."""
    spent_before: int = 0
    extra_iterations: int = 0
    over_budget: Callable[[], bool] | None = None
    budget: Callable[[], Budget | None] | None = None
    """What the step may still spend (None: no limit): Claude gets it as --max-budget-usd, and
    an iteration whose stream shows it crossed is stopped."""
    stall_after: float | None = DEFAULT_STALL_TIMEOUT
    """Seconds without output after which an iteration is stopped as stalled (None: never)."""
    after_iteration: Callable[[IterationResult], IterationResult] | None = None
    """Hook run after every iteration (e.g. ref checks); may turn it into a failure."""
    log_limits: LogLimits = field(default_factory=LogLimits)
    """How much output the iteration logs keep (per iteration, per run)."""
    cli_home: Path | None = None
    """`PreparedStep.cli_home`: where the CLI's settings files go in a sandbox apart from here."""
    schema: str | None = None
    """The JSON Schema of the answer the step asks for (forge's stages); the answer is taken
    from the CLI's structured output, else from the model's last text."""

    @property
    def maximum(self) -> int:
        return self.step.iterations + self.extra_iterations


class StepLoop:
    """Runs one step's iterations."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.results: list[IterationResult] = []
        self._attempts = len(ctx.record.iterations)
        self._stop_reason: Reason = StepEnd.MAX_ITERATIONS

    def run(self) -> StepOutcome:
        ctx = self.ctx
        remaining = ctx.maximum - ctx.spent_before
        if remaining <= 0:
            return self._outcome(False, StepEnd.MAX_ITERATIONS)
        if not ctx.step.loop:
            remaining = 1
        retrying = Retrying(
            stop=lambda state: self._should_stop(state, remaining),
            retry=retry_if_result(lambda result: not result.complete),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        last: IterationResult = retrying(self._iteration)
        if last.complete:
            return self._outcome(True, last.reason)
        if last.reason in CUT_OFF and not ctx.step.loop:
            return self._outcome(False, last.reason)
        return self._outcome(False, self._stop_reason)

    def _outcome(self, complete: bool, reason: Reason) -> StepOutcome:
        ctx = self.ctx
        budget = ctx.budget() if ctx.budget is not None else None
        cause = None
        if not complete and reason in RAN_OUT:
            cause = alike(
                [it.reason or "" for it in ctx.record.iterations if it.counted],
                max_turns=ctx.agent.max_turns,
                timeout=ctx.timeout,
                stall_after=ctx.stall_after,
            )
        return StepOutcome(
            complete=complete,
            reason=reason,
            iterations=tuple(self.results),
            spent_before=ctx.spent_before,
            maximum=ctx.maximum,
            detail=budget.stopped(budget.spent) if budget and reason == StepEnd.MAX_COST else None,
            cause=cause,
        )

    def _should_stop(self, state: RetryCallState, remaining: int) -> bool:
        ctx = self.ctx
        counted = [r for r in self.results if r.counted]
        last = self.results[-1] if self.results else None
        if last is not None and last.reason in STOPS_THE_STEP:
            self._stop_reason = stops_step_as(last.reason)
            return True
        if len(counted) >= remaining:
            self._stop_reason = StepEnd.MAX_ITERATIONS
            return True
        if ctx.over_budget is not None and ctx.over_budget():
            self._stop_reason = StepEnd.MAX_COST
            return True
        limit = ctx.no_progress_limit
        if limit > 0 and len(counted) >= limit:
            recent = counted[-limit:]
            if all(r.changed is False for r in recent):
                self._stop_reason = StepEnd.NO_PROGRESS
                return True
            tails = {r.error_tail for r in recent}
            if len(tails) == 1 and None not in tails:
                self._stop_reason = StepEnd.REPEATED_ERROR
                return True
        return False

    def _iteration(self) -> IterationResult:
        """One counted iteration, retried with back-off while the API answers rate limits."""
        number = self.ctx.spent_before + sum(1 for r in self.results if r.counted) + 1
        backoff = Retrying(
            retry=retry_if_result(lambda result: result.rate_limited),
            wait=wait_exponential(
                multiplier=self.ctx.rate_limit_min_wait, min=self.ctx.rate_limit_min_wait, max=300
            ),
            stop=stop_after_delay(self.ctx.rate_limit_max_wait),
            before_sleep=self._report_backoff,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        result: IterationResult = backoff(self._attempt, number)
        if result.rate_limited:  # gave up waiting: this one counts
            result = self._mark_counted(result)
        return result

    def _report_backoff(self, state: RetryCallState) -> None:
        wait = state.next_action.sleep if state.next_action else 0
        self.ctx.reporter.warn(
            f"rate limited by the API; waiting {wait:.0f}s (this does not use up an iteration)"
        )

    def _mark_counted(self, result: IterationResult) -> IterationResult:
        counted = replace(result, counted=True)
        self.results[-1] = counted
        self._writer.count_iteration(self.ctx.record.iterations[-1])
        return counted

    @property
    def _writer(self) -> RecordWriter:
        return self.ctx.run if self.ctx.run is not None else RecordWriter()

    def _begin(self, number: int) -> tuple[IterationRecord, Path | None]:
        """The iteration's record (begun, not yet counted) and the path of its log."""
        ctx = self.ctx
        self._attempts += 1
        log_path = ctx.run.log_path(ctx.record, self._attempts) if ctx.run else None
        record = IterationRecord(
            number=number,
            started=now(),
            log=ctx.run.relative(log_path) if ctx.run and log_path else "",
            counted=False,
        )
        self._writer.begin_iteration(ctx.record, record)
        ctx.reporter.iteration_started(number, ctx.maximum, ctx.step.loop)
        return record, log_path

    def _attempt(self, number: int) -> IterationResult:
        ctx = self.ctx
        record, log_path = self._begin(number)
        budget = ctx.budget() if ctx.budget is not None else None
        monitor = monitor_for(ctx.agent)
        probe = ctx.progress if ctx.no_progress_limit > 0 and ctx.step.loop else None
        before = probe() if probe else None
        tap = self._tap(monitor, log_path)
        agent_started = False
        try:
            with (
                tap,
                cli_home(ctx.agent, ctx.cli_home) as home,
                ctx.sandbox.start(self._spec(budget, home)) as execution,
                iteration_guard(execution, ctx.agent, budget, ctx.stall_after) as guard,
            ):
                agent_started = True
                self._writer.set_container(record, execution.container_id)
                for stream, chunk in execution.chunks():
                    tap.feed(stream, chunk)
                    guard.output(_cost(monitor, execution), *monitor_progress(monitor))
                tap.finish()
                exit_status = execution.wait()
                metered = execution.metered_cost()
                guard.ended(metered)
                if exit_status.container_id:  # known only now on a swarm (its task's)
                    self._writer.set_container(record, exit_status.container_id)
        except BaseException as exc:
            if isinstance(exc, Exception) and not (agent_started and _agent_ran(exc)):
                # Its agent never ran: it was no iteration (and a run that fails so at its
                # first leaves nothing behind).
                self._writer.drop_iteration(ctx.record, record)
                if log_path is not None and not tap.written:
                    _remove_empty_log(log_path)
                raise
            self._writer.set_log_size(record, tap.written, tap.dropped)
            self._writer.abort_iteration(record, interrupted=not isinstance(exc, Exception))
            raise
        self._writer.set_log_size(record, tap.written, tap.dropped)
        seen = replace(self._seen(number, exit_status, monitor, guard, budget), metered=metered)
        result = self._classify(seen, record.started, tap, _changed(probe, before))
        if ctx.after_iteration is not None:
            result = ctx.after_iteration(result)
        self._writer.end_iteration(record, result)
        self.results.append(result)
        ctx.reporter.iteration_ended(result)
        return result

    def _spec(self, budget: Budget | None, home: Path | None) -> ExecSpec:
        ctx = self.ctx
        return iteration_spec(
            ctx.agent,
            Asked(ctx.args, ctx.prompt.read(), ctx.env, ctx.timeout, ctx.labels, ctx.schema),
            budget,
            home,
            carried=ctx.cli_home is not None,
        )

    def _tap(self, monitor: Monitor, log_path: Path | None) -> OutputTap:
        """The iteration's output tap, bounded by what is left of both log limits."""
        ctx, limits = self.ctx, self.ctx.log_limits
        limit = limits.iteration
        what = (
            f"the log limit of {byte_limit(limit)} per iteration (maxLogBytes, FKS_MAX_LOG_BYTES)"
        )
        if ctx.run is not None:
            left = limits.run - ctx.run.record.log_bytes
            if left < limit:
                limit = max(0, left)
                what = f"the run's log limit of {byte_limit(limits.run)} (maxRunLogBytes, FKS_MAX_RUN_LOG_BYTES)"
        return OutputTap(
            monitor=monitor,
            reporter=ctx.reporter,
            stream_json=ctx.agent.cli is not None,
            secrets=ctx.secrets,
            log_path=log_path,
            limit=limit,
            what=what,
        )

    def _seen(
        self, number: int, status: ExecResult, monitor: Monitor, guard: Guard, budget: Budget | None
    ) -> Seen:
        return Seen(
            number=number,
            status=status,
            result=monitor.result if isinstance(monitor, StreamJsonMonitor) else None,
            marker=monitor.marker_seen,
            stream_json=self.ctx.agent.cli is not None,
            cli=self.ctx.agent.cli,
            timeout=self.ctx.timeout,
            stopped=guard.stopped,
            budget=budget,
            running_cost=monitor_cost(monitor) or 0.0,
            stall_after=self.ctx.stall_after,
        )

    def _classify(
        self, seen: Seen, started: datetime, tap: OutputTap, changed: bool | None
    ) -> IterationResult:
        loop = self.ctx.step.loop
        end = ending(seen)
        reason = (
            IterationEnd.ONCE if end.reason == IterationEnd.NO_MARKER and not loop else end.reason
        )
        failed = end.failed or seen.status.exit_code != 0
        complete = seen.marker or (not loop and reason not in ENDS_A_STEP_WITHOUT_N)
        result_event = seen.result
        error_tail = _error_tail(tap, result_event) if failed and not complete else None
        return IterationResult(
            number=seen.number,
            complete=complete,
            marker=seen.marker,
            reason=reason,
            exit_code=seen.status.exit_code,
            started=started,
            ended=now(),
            counted=end.counted,
            container_id=seen.status.container_id,
            claude=_stats(result_event, seen, answer=self.ctx.schema is not None),
            changed=changed,
            error_tail=error_tail or None,
            note=end.note,
        )


def _cost(monitor: Monitor, execution: Execution) -> float | None:
    """What the iteration has spent so far, at least: the meter's figure or its stream's."""
    costs = [c for c in (monitor_cost(monitor), execution.metered_cost()) if c is not None]
    return max(costs) if costs else None


def _remove_empty_log(path: Path) -> None:
    """An iteration's empty log file, and its step's folder if nothing else is in it."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _agent_ran(exc: Exception) -> bool:
    """Whether the agent ran before `exc` (the container started, but not its agent: no)."""
    return not isinstance(exc, AgentNotFoundError)


def _stats(result: Result | None, seen: Seen, *, answer: bool) -> ClaudeStats | None:
    """The iteration's figures: its result's, else estimated from what was seen."""
    return with_metered(seen, claude_stats(result, answer=answer) if result is not None else None)


def _error_tail(tap: OutputTap, result: Result | None) -> str | None:
    return tap.stderr_tail() or (result.text if result and result.is_error else None)


def _changed(probe: Callable[[], str | None] | None, before: str | None) -> bool | None:
    """Whether the progress probe's answer changed over the iteration (None: not known)."""
    if before is None or probe is None:
        return None
    after = probe()
    return None if after is None else after != before
