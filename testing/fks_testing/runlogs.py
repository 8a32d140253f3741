"""Run records written directly, as fks writes them, for tests and benchmarks that need a shape
a real run takes too long to make (a step of 1,000 iterations) or data an agent could not
choose through fks (a hostile branch name)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sandbox_runner.outcomes import Exit, IterationEnd, Status
from sandbox_runner.paths import write_atomic
from sandbox_runner.records.record import IterationRecord, RunOptions, RunRecord, StepRecord
from sandbox_runner.results.reported import ClaudeStats, DeniedRecord

START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def iteration(number: int, at: datetime, *, log: str, seconds: float = 3.0) -> IterationRecord:
    """An iteration that ran `seconds` from `at`: every 7th failed, every 11th had a refusal,
    the last of a step is left for the caller to mark."""
    failed = number % 7 == 0
    return IterationRecord(
        number=number,
        started=at,
        ended=at + timedelta(seconds=seconds),
        exit_code=3 if failed else 0,
        reason=Exit(3) if failed else IterationEnd.NO_MARKER,
        log=log,
        changed=True,
        claude=ClaudeStats(cost_usd=0.01 * (number % 5), turns=2),
        denied=[DeniedRecord(host="blocked.example", port=443, count=2)]
        if number % 11 == 0
        else [],
    )


def write_run(
    project: Path,
    run_id: str,
    *,
    steps: list[int],
    branches: list[str | None] | None = None,
    base_commit: str | None = None,
    log_text: bytes = b"output\n",
) -> RunRecord:
    """A finished run in `project` whose step n ran `steps[n-1]` iterations (each with a log
    holding `log_text`); step n is on `branches[n-1]` (started at `base_commit`) if given."""
    run_dir = project / ".forge" / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    at = START
    records: list[StepRecord] = []
    for index, count in enumerate(steps, start=1):
        step = StepRecord(
            index=index, agent=f"./scripts/step{index}.sh", iterations_max=count, loop=True
        )
        step.started = at
        for number in range(1, count + 1):
            log = f"logs/step{index}-{number}.log"
            (run_dir / log).write_bytes(log_text)
            step.iterations.append(iteration(number, at, log=log))
            at += timedelta(seconds=4)
        step.iterations[-1].marker, step.iterations[-1].reason = True, IterationEnd.MARKER
        step.status, step.reason, step.ended = Status.COMPLETE, IterationEnd.MARKER, at
        branch = branches[index - 1] if branches else None
        if branch is not None:
            step.repo, step.branch, step.base_branch = str(project), branch, "main"
            step.start_commit = base_commit
        records.append(step)
    record = RunRecord(
        id=run_id,
        status=Status.COMPLETE,
        started=START,
        ended=at,
        pid=1,
        cwd=str(project),
        options=RunOptions(dsl=" -> ".join(s.agent for s in records), sandbox=bool(branches)),
        base_branch="main",
        base_commit=base_commit,
        steps=records,
    )
    write_atomic(run_dir / "run.json", record.model_dump_json(indent=2))
    return record
