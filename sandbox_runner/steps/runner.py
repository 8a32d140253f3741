"""One step, for a chain and a forge stage alike: prepare its workspace on the backend, run its
loop (or, resumed after its work could not land, only land it again), land its work, and record
how the step ended - also when it is interrupted or fails. The backend returns what became of
the step's work (its branch, its tip, its merge, its last requests); this module writes it to
the step's record, as `open_session` writes where the run's steps land.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from sandbox_runner.backends.api import Backend, Landed, Notices, PreparedStep
from sandbox_runner.errors import Interrupted
from sandbox_runner.outcomes import IterationEnd, Reason, Status, StepEnd
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.record import StepRecord
from sandbox_runner.records.resume import awaits_landing
from sandbox_runner.records.store import ActiveRun, Ended
from sandbox_runner.results.ended import StepOutcome
from sandbox_runner.steps.guards import DEFAULT_STALL_TIMEOUT, Budget
from sandbox_runner.steps.loop import (
    DEFAULT_NO_PROGRESS_LIMIT,
    DEFAULT_RATE_LIMIT_MAX_WAIT,
    StepContext,
    StepLoop,
)
from sandbox_runner.steps.reporter import Reporter
from sandbox_runner.steps.tap import LogLimits


@dataclass(frozen=True)
class StepSettings:
    """How a step's loop runs, beyond the step itself (the run's settings, the caller's)."""

    args: Sequence[str] = ()
    """Arguments before the step's own (`fks run … -- ARGS`)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to those the backend gives the agent."""
    secrets: Sequence[str] = ()
    """Values masked wherever the step's output is kept or shown."""
    no_progress_limit: int = DEFAULT_NO_PROGRESS_LIMIT
    rate_limit_max_wait: float = DEFAULT_RATE_LIMIT_MAX_WAIT
    extra_iterations: int = 0
    """Iterations beyond the step's own (`--more` on the step a resumed run continues)."""
    over_budget: Callable[[], bool] | None = None
    budget: Callable[[], Budget | None] | None = None
    """What the step may still spend (None: no limit)."""
    stall_after: float | None = DEFAULT_STALL_TIMEOUT
    """Seconds without output before an iteration is stopped as stalled (None: never)."""
    log_limits: LogLimits = field(default_factory=LogLimits)
    schema: str | None = None
    """The JSON Schema the step's answer must fit (forge's stages): asked of the CLI where it
    has a way; its answer is recorded as the iteration's `structured_output`."""


def run_step(
    step: Step,
    prompt: PromptSource,
    record: StepRecord,
    *,
    backend: Backend,
    reporter: Reporter,
    run: ActiveRun,
    settings: StepSettings,
) -> StepOutcome:
    """Run `step` (recorded in `record`, a step of `run`) on `backend` and land its work."""
    spent = record.iterations_used
    run.begin_step(record)
    prepared: PreparedStep | None = None
    try:
        with backend.step(record.index, step, record) as prepared:
            _bound(run, record, prepared)
            if settings.env:
                prepared.env = {**prepared.env, **settings.env}
            ctx = _context(step, prompt, prepared, reporter, run, record, settings, spent)
            outcome = _run_or_retry_landing(ctx, record, spent)
            if prepared.land is not None:
                outcome = _landed(run, record, prepared.land(outcome))
    except (Interrupted, KeyboardInterrupt):
        _stopped(run, record, prepared, Status.INTERRUPTED, IterationEnd.INTERRUPTED)
        raise
    except Exception as exc:
        _stopped(run, record, prepared, Status.FAILED, str(exc)[:500])
        raise
    run.finish_step(record, complete=outcome.complete, reason=outcome.reason)
    return outcome


@contextmanager
def open_session(backend: Backend, run: ActiveRun, reporter: Notices) -> Iterator[None]:
    """The backend's session of `run`, with where the run's steps land written to its record."""
    # A run that was reopened (resumed) has paused: only then can a killed process have left
    # anything of it behind.
    with backend.session(run.record.id, reporter, resumed=bool(run.record.pauses)) as place:
        if place.base_branch is not None:
            run.set_base(place.base_branch, place.base_commit)
        if place.engine is not None:
            run.set_engine(place.engine)
        yield


def _bound(run: ActiveRun, record: StepRecord, prepared: PreparedStep) -> None:
    """Where the backend put the step's work: its branch and workspace; a resumed step's tip
    too (with what its killed run had left in the workspace)."""
    binding = prepared.binding
    if binding is None:
        return
    run.bind_branch(
        record,
        repo=binding.repo,
        base=binding.base,
        branch=binding.branch,
        workspace=binding.workspace,
        start_commit=binding.start_commit,
    )
    if binding.start_commit is None and prepared.head is not None:
        run.set_head(record, prepared.head())


def _landed(run: ActiveRun, record: StepRecord, landed: Landed) -> StepOutcome:
    """What landing the step did, written to its record; the step's outcome."""
    if landed.late is not None and record.iterations:
        late = landed.late
        run.set_denied(record.iterations[-1], list(late.denied), late.denied_more, late.network)
    run.set_head(record, landed.head)
    if landed.landing is not None:
        run.record_landing(record, landed.landing)
    return landed.outcome


def _stopped(
    run: ActiveRun,
    record: StepRecord,
    prepared: PreparedStep | None,
    status: Ended,
    reason: Reason | str,
) -> None:
    """The step was interrupted or failed, and the run with it: its branch's tip (with what was
    saved of its work) and how it ended are written to its record."""
    if prepared is not None and prepared.head is not None:
        run.set_head(record, prepared.head())
    run.abort(record, record.index, status, reason)


def _context(
    step: Step,
    prompt: PromptSource,
    prepared: PreparedStep,
    reporter: Reporter,
    run: ActiveRun,
    record: StepRecord,
    settings: StepSettings,
    spent: int,
) -> StepContext:
    """Everything the step's loop needs, from the step, the backend and the settings."""
    return StepContext(
        step=step,
        agent=prepared.agent,
        prompt=prompt,
        sandbox=prepared.sandbox,
        reporter=reporter,
        record=record,
        run=run,
        args=[*settings.args, *step.args],
        env=prepared.env,
        labels=prepared.labels,
        timeout=prepared.timeout,
        secrets=settings.secrets,
        progress=prepared.progress,
        no_progress_limit=settings.no_progress_limit,
        rate_limit_max_wait=settings.rate_limit_max_wait,
        spent_before=spent,
        extra_iterations=settings.extra_iterations,
        over_budget=settings.over_budget,
        budget=settings.budget,
        stall_after=settings.stall_after,
        after_iteration=prepared.after_iteration,
        log_limits=settings.log_limits,
        cli_home=prepared.cli_home,
        schema=settings.schema,
    )


def _run_or_retry_landing(ctx: StepContext, record: StepRecord, spent: int) -> StepOutcome:
    if awaits_landing(record):  # only its merge was left: no agent runs
        return StepOutcome(
            complete=True, reason=StepEnd.LANDED_ON_RESUME, spent_before=spent, maximum=ctx.maximum
        )
    return StepLoop(ctx).run()
