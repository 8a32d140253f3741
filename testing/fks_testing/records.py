"""Run records written straight to a project's `.forge/runs/` (no agent runs), for the tests
and benchmarks of `fks ui`: many runs, a step of many iterations, hostile text in them."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sandbox_runner.outcomes import IterationEnd, Status
from sandbox_runner.paths import write_atomic
from sandbox_runner.records.record import IterationRecord, RunOptions, RunRecord, StepRecord
from sandbox_runner.records.store import RunStore
from sandbox_runner.results.reported import ClaudeStats

DEAD_PID = 2**22 + 1
"""A pid above Linux's pid_max: no process has it (a `running` record with it has died)."""
START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def iterations(count: int, started: datetime, cost: float = 0.01) -> list[IterationRecord]:
    """`count` finished iterations of a minute each from `started`, each costing `cost`."""
    return [
        IterationRecord(
            number=n,
            started=started + timedelta(minutes=n - 1),
            ended=started + timedelta(minutes=n - 1, seconds=50),
            exit_code=0,
            marker=n == count,
            reason=IterationEnd.MARKER if n == count else IterationEnd.NO_MARKER,
            log=f"01-builder/{n:03d}.log",
            changed=True,
            claude=ClaudeStats(cost_usd=cost, input_tokens=1000, output_tokens=200, turns=3),
        )
        for n in range(1, count + 1)
    ]


def make_run(
    run_id: str,
    *,
    started: datetime = START,
    status: Status | str = Status.COMPLETE,
    chain: str = "ralph",
    steps: int = 1,
    iterations_per_step: int = 2,
    cost: float = 0.01,
    merged: bool = False,
    pid: int = DEAD_PID,
) -> RunRecord:
    """A run record of `steps` steps of `iterations_per_step` iterations costing `cost` each."""
    status = Status(status)
    running = status == Status.RUNNING
    return RunRecord(
        id=run_id,
        status=status,
        reason=None if status in (Status.RUNNING, Status.COMPLETE) else IterationEnd.NO_MARKER,
        started=started,
        ended=None if running else started + timedelta(hours=1),
        pid=pid,
        cwd="/tmp/project",
        options=RunOptions(chain=chain),
        base_branch="main",
        steps=[
            StepRecord(
                index=n,
                agent="builder",
                iterations_max=iterations_per_step,
                loop=True,
                status=Status.RUNNING if running else Status.COMPLETE,
                started=started,
                ended=None if running else started + timedelta(hours=1),
                branch=f"fks/{run_id}/{n}-builder",
                merged=merged,
                iterations=iterations(iterations_per_step, started, cost),
            )
            for n in range(1, steps + 1)
        ],
    )


def save_run(project: Path, record: RunRecord) -> Path:
    """Write `record` as `project`'s run (its directory made); the path of its run.json."""
    directory = RunStore(project).run_dir(record.id)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.json"
    write_atomic(path, record.model_dump_json(indent=2))
    return path


def many_runs(project: Path, count: int, chains: tuple[str, ...] = ("ralph", "review")) -> None:
    """`count` finished runs, an hour apart, cycling through `chains` and statuses."""
    statuses = (Status.COMPLETE, Status.INCOMPLETE, Status.FAILED, Status.COMPLETE)
    for n in range(count):
        record = make_run(
            f"20261101-{n:06d}-{n % 65536:04x}",
            started=START + timedelta(hours=n),
            status=statuses[n % len(statuses)],
            chain=chains[n % len(chains)],
            merged=n % 4 == 0,
        )
        save_run(project, record)


def touch_later(path: Path) -> None:
    """Move `path`'s modification time a second on (a change the watcher must see even when the
    file system's clock is coarse)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
