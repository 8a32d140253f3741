"""`fks run --resume RUN`: continue an interrupted or incomplete run from its first unfinished
step, on that step's branch, counting the iterations it already used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.errors import LockedError, UsageError
from sandbox_runner.outcomes import NOT_LANDED, Status
from sandbox_runner.paths import shorten
from sandbox_runner.records.record import RunRecord, StepRecord, run_alive
from sandbox_runner.records.store import RunStore, project_root

if TYPE_CHECKING:
    from sandbox_runner.plan.planned import Planned


@dataclass
class Resumed:
    planned: Planned
    record: RunRecord


def plan_resume(
    ref: str, *, cwd: Path, targets: Sequence[str], chain: str | None, more: int
) -> Resumed:
    """Load run `ref` and re-plan it exactly as it was started."""
    from sandbox_runner.plan.planned import plan_run

    if targets or chain:
        raise UsageError(
            "--resume continues a run as it was started: give no DSL, --chain or VAR=value"
        )
    store = RunStore(project_root(cwd))
    record = store.load(store.resolve(ref))
    if record.status == Status.COMPLETE:
        raise UsageError(f"run {record.id} is complete; there is nothing to resume")
    if run_alive(record) and record.pid != os.getpid():
        raise LockedError(
            f"run {record.id} is still running (pid {record.pid}); wait for it or stop it first"
        )
    _check_place(record, store.project)
    planned = plan_run(record.options, Path(record.cwd))
    agents = [s.agent for s in planned.plan.steps]
    if agents != [s.agent for s in record.steps]:
        raise UsageError(
            f"the chain changed since run {record.id} started ({' -> '.join(s.agent for s in record.steps)} "
            f"then, {' -> '.join(agents)} now); start a new run instead"
        )
    # By position: the same agent may appear twice with different counts (a:3 -> b -> a:5).
    record.prepare_resume(lambda step: planned.plan.steps[step.index - 1].iterations + more)
    _check_iterations_left(record, more)
    return Resumed(planned=planned, record=record)


def awaits_landing(step: StepRecord) -> bool:
    """The step's agent finished, but its work could not land then (a blocked merge, a
    conflict): resumed, it is only merged again, whatever its iterations."""
    counted = any(it.counted for it in step.iterations)
    return counted and step.reason in NOT_LANDED


def _check_place(record: RunRecord, project: Path) -> None:
    """A run resumes where it ran: in this project (a record copied into its `.forge/` may
    name any folder, whose config, agents and git fks would otherwise use)."""
    from sandbox_runner.console.ansi import strip_escapes
    from sandbox_runner.records.places import inside

    if (
        inside(record.cwd, project)
        and project_root(Path(record.cwd)).resolve() == project.resolve()
    ):
        return
    raise UsageError(
        strip_escapes(
            f"run {record.id} names {shorten(record.cwd)} as the folder it ran in, which is not "
            f"in this project ({project}); fks resumes a run only in the project whose .forge/ "
            "holds its record: start a new run instead"
        )
    )


def _check_iterations_left(record: RunRecord, more: int) -> None:
    """A resumed run whose next step has no iteration left would run nothing: say what to do."""
    step = next((s for s in record.steps if s.status != Status.COMPLETE), None)
    if step is None or step.iterations_used < step.iterations_max or awaits_landing(step):
        return
    n = step.iterations_max
    allowed = f"{n} iteration{'s' if n != 1 else ''}" + (f" (with --more {more})" if more else "")
    raise UsageError(
        f"step {step.index} ({step.agent}) of run {record.id} has used all its {allowed}; "
        f"allow more with: fks run --resume {record.id} --more N"
    )
