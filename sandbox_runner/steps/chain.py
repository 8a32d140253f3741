"""Steps in order: prepare each step's workspace, run its loop, land its work, stop at the
first step that does not complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox_runner.backends.api import Backend
from sandbox_runner.outcomes import Status, StepEnd
from sandbox_runner.plan.agents import step_prompt
from sandbox_runner.plan.config import AgentConfig, ChainPlan
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.notify import entry_urls, url_secrets
from sandbox_runner.plan.planned import Planned
from sandbox_runner.records.masking import masked_names, secrets_from_env
from sandbox_runner.records.record import RunRecord, StepRecord
from sandbox_runner.records.resume import awaits_landing
from sandbox_runner.records.store import ActiveRun
from sandbox_runner.results.ended import StepOutcome
from sandbox_runner.steps.guards import DEFAULT_STALL_TIMEOUT, Budget
from sandbox_runner.steps.loop import DEFAULT_NO_PROGRESS_LIMIT, DEFAULT_RATE_LIMIT_MAX_WAIT
from sandbox_runner.steps.reporter import Reporter
from sandbox_runner.steps.runner import StepSettings, run_step
from sandbox_runner.steps.tap import LogLimits


@dataclass
class ChainOptions:
    """Run-wide settings for `run_chain`."""

    cwd: Path
    agents: dict[str, AgentConfig]
    cli_prompt: str | None = None
    cli_prompt_file: Path | None = None
    global_args: Sequence[str] = ()
    secrets: Sequence[str] = ()
    no_progress_limit: int = DEFAULT_NO_PROGRESS_LIMIT
    rate_limit_max_wait: float = DEFAULT_RATE_LIMIT_MAX_WAIT
    max_cost: float | None = None
    stall_after: float = DEFAULT_STALL_TIMEOUT
    """Seconds without output before an iteration is stopped as stalled (0: never)."""
    more: int = 0
    """Extra iterations allowed for the step a resumed run continues."""
    log_limits: LogLimits = field(default_factory=LogLimits)


@dataclass(frozen=True)
class StepSummary:
    index: int
    agent: str
    loop: bool
    outcome: StepOutcome
    record: StepRecord


@dataclass(frozen=True)
class ChainResult:
    """What `fks run` reports: per-step results and where the chain stopped."""

    success: bool
    steps: tuple[StepSummary, ...]
    failed_at: int | None
    total: int
    cost_usd: float
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "run_id": self.run_id,
            "failed_at": self.failed_at,
            "total_steps": self.total,
            "cost_usd": round(self.cost_usd, 6),
            "steps": [_step_json(s) for s in self.steps],
        }


def _step_json(summary: StepSummary) -> dict[str, Any]:
    outcome, record = summary.outcome, summary.record
    last = outcome.last
    return {
        "index": summary.index,
        "agent": summary.agent,
        "loop": summary.loop,
        "complete": outcome.complete,
        "reason": outcome.reason,
        "iterations": outcome.iterations_used,
        "max_iterations": outcome.maximum,
        "exit_code": last.exit_code if last else None,
        "cost_usd": round(record.cost_usd, 6),
        "branch": record.branch,
        "merged": record.merged,
        "merge_commit": record.merge_commit,
        "conflicts": record.conflicts,
        "iteration_details": [
            {
                "number": it.number,
                "counted": it.counted,
                "exit_code": it.exit_code,
                "marker": it.marker,
                "reason": it.reason,
                "note": it.note,
                "container_id": it.container_id,
                "changed": it.changed,
                "log": it.log,
                "log_dropped": it.log_dropped,
                "claude": it.claude.model_dump() if it.claude else None,
            }
            for it in record.iterations
        ],
    }


def chain_options(planned: Planned, *, more: int = 0) -> ChainOptions:
    """The run-wide settings of a planned run: its options, then the chain's, then the config's
    (`more`: extra iterations for the step a resumed run continues)."""
    cfg, options = planned.config, planned.options
    limit = planned.no_progress_limit
    if limit is None:
        limit = planned.plan.no_progress_limit
    if limit is None and cfg is not None:
        limit = cfg.no_progress_limit
    wait = cfg.rate_limit_max_wait if cfg is not None else None
    stall = cfg.stall_timeout if cfg is not None else None
    return ChainOptions(
        cwd=planned.cwd,
        agents=planned.agents,
        cli_prompt=planned.cli_prompt,
        cli_prompt_file=Path(options.prompt_file) if options.prompt_file else None,
        global_args=options.global_args,
        secrets=sorted(
            {
                *secrets_from_env(masked_names(planned.sandbox_settings())),
                *url_secrets(entry_urls(cfg.notify if cfg is not None else ())),
            },
            key=len,
            reverse=True,
        ),
        no_progress_limit=DEFAULT_NO_PROGRESS_LIMIT if limit is None else limit,
        rate_limit_max_wait=DEFAULT_RATE_LIMIT_MAX_WAIT if wait is None else wait,
        max_cost=options.max_cost,
        stall_after=DEFAULT_STALL_TIMEOUT if stall is None else stall,
        more=more,
        log_limits=LogLimits.of_config(cfg),
    )


def run_chain(
    plan: ChainPlan,
    *,
    backend: Backend,
    reporter: Reporter,
    run: ActiveRun,
    options: ChainOptions,
) -> ChainResult:
    """Run the steps in order; stop at the first that does not complete (the run's owner
    finishes its record from the result)."""
    record = run.record
    total = len(plan.steps)
    summaries: list[StepSummary] = []
    failed_at: int | None = None
    for index, step in enumerate(plan.steps, start=1):
        step_record = record.steps[index - 1]
        if step_record.status == Status.COMPLETE:  # done in an earlier (resumed) session
            continue
        budget = _budget(record, options)
        if budget is not None and budget.left <= 0:
            stopped = budget.stopped(budget.spent)
            outcome = StepOutcome(
                complete=False, reason=StepEnd.MAX_COST, maximum=step.iterations, detail=stopped
            )
            _finish_step(run, step_record, outcome)
            reporter.warn(f"{stopped}; not starting step {index}")
            summaries.append(StepSummary(index, step.agent, step.loop, outcome, step_record))
            failed_at = index
            break
        outcome = _run_step(index, total, step, plan, backend, reporter, run, options, step_record)
        summaries.append(StepSummary(index, step.agent, step.loop, outcome, step_record))
        if not outcome.complete:
            failed_at = index
            break
    success = failed_at is None
    return ChainResult(
        success=success,
        steps=tuple(summaries),
        failed_at=failed_at,
        total=total,
        cost_usd=record.cost_usd,
        run_id=record.id,
    )


def _over_budget(record: RunRecord, options: ChainOptions) -> bool:
    return options.max_cost is not None and record.cost_usd >= options.max_cost


def _budget(record: RunRecord, options: ChainOptions) -> Budget | None:
    """What the run may still spend under --max-cost (None: no limit)."""
    if options.max_cost is None:
        return None
    return Budget(limit=options.max_cost, spent=record.cost_usd)


def _run_step(
    index: int,
    total: int,
    step: Step,
    plan: ChainPlan,
    backend: Backend,
    reporter: Reporter,
    run: ActiveRun,
    options: ChainOptions,
    step_record: StepRecord,
) -> StepOutcome:
    more = options.more if step_record.iterations else 0  # a resumed step's extra iterations
    prompt = step_prompt(
        step, plan, options.agents, options.cwd, options.cli_prompt, options.cli_prompt_file
    )
    if awaits_landing(step_record):
        reporter.info(
            f"Resuming step {index}/{total} ({step.agent}): its agent had finished, only its "
            f"merge was left; merging {step_record.branch} again (no agent runs)"
        )
    else:
        reporter.step_started(index, total, step.agent, step.iterations + more, step.loop)
    outcome = run_step(
        step,
        prompt,
        step_record,
        backend=backend,
        reporter=reporter,
        run=run,
        settings=_step_settings(run, options, more),
    )
    reporter.step_ended(step.agent, outcome, step.loop)
    return outcome


def _step_settings(run: ActiveRun, options: ChainOptions, more: int) -> StepSettings:
    """How the chain's steps run, from the run's options and what it has spent so far."""
    return StepSettings(
        args=options.global_args,
        secrets=options.secrets,
        no_progress_limit=options.no_progress_limit,
        rate_limit_max_wait=options.rate_limit_max_wait,
        extra_iterations=more,
        over_budget=(lambda: _over_budget(run.record, options))
        if options.max_cost is not None
        else None,
        budget=lambda: _budget(run.record, options),
        stall_after=options.stall_after or None,
        log_limits=options.log_limits,
    )


def _finish_step(run: ActiveRun, step_record: StepRecord, outcome: StepOutcome) -> None:
    run.finish_step(step_record, complete=outcome.complete, reason=outcome.reason)
