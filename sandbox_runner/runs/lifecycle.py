"""One run, opened and closed in one place, for `fks run` and a forge worker alike.

`checked_backend` is where every backend is made (and checked before anything starts);
`run_planned` is the whole life of an `fks run`: backend, preflight, run lock, record, the
backend's session around the chain, and what an interruption or a failure leaves of the record;
`task_run` is the same life for a forge task's stages in its worker process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.backends.api import Backend, Sandbox
from sandbox_runner.backends.factory import make_backend
from sandbox_runner.errors import Interrupted
from sandbox_runner.git.repo import current_branch, exclude_forge_dir
from sandbox_runner.notify import events as notify_events
from sandbox_runner.outcomes import IterationEnd, Status
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.planned import Planned
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.plan.sandbox import SandboxSettings, files_read
from sandbox_runner.records.lock import RunLocks, run_locks
from sandbox_runner.records.masking import Masker
from sandbox_runner.records.record import RunOptions, RunRecord, StepRecord, now
from sandbox_runner.records.store import ActiveRun, RunStore, new_run_id, project_root
from sandbox_runner.results.ended import StepOutcome
from sandbox_runner.signals import signals_as_interrupts
from sandbox_runner.steps.reporter import Reporter

if TYPE_CHECKING:
    from sandbox_runner.notify.send import Notifier
    from sandbox_runner.pulls.target import PrTarget
    from sandbox_runner.steps.chain import ChainResult
    from sandbox_runner.steps.runner import StepSettings

# `steps.chain` and `steps.runner` (the loop, its guards, tenacity) are imported where a step
# runs: `fks run --dry-run` loads this module and runs none, and they added about a tenth to
# its start-up (measured: 517 -> 568 ms of CPU under load).


@dataclass(frozen=True)
class BackendSpec:
    """What a run's backend is made from (each field as `make_backend` takes it)."""

    cwd: Path
    agents: dict[str, AgentConfig]
    sandbox: SandboxSettings | None
    base: str | None = None
    checked_base: bool = False
    keep_interrupted: bool = True
    dry_run: bool = False
    local_sandbox: Sandbox | None = None
    secret_files: Sequence[str] = ()


@dataclass(frozen=True)
class CheckedBackend:
    """A backend whose preflight passed, and the steps' agents as it resolved them."""

    backend: Backend
    commands: list[AgentCommand]


def checked_backend(spec: BackendSpec, steps: Sequence[Step]) -> CheckedBackend:
    """The backend `spec` asks for, each step's agent resolved on it, then everything checked
    that can be before anything starts (a dry run checks all a real one would)."""
    backend = make_backend(
        cwd=spec.cwd,
        agents=spec.agents,
        sandbox=spec.sandbox,
        base=spec.base,
        checked_base=spec.checked_base,
        keep_interrupted=spec.keep_interrupted,
        dry_run=spec.dry_run,
        local_sandbox=spec.local_sandbox,
        secret_files=spec.secret_files,
    )
    commands = [backend.resolve(step) for step in steps]
    backend.preflight(list(steps))
    return CheckedBackend(backend, commands)


def chain_backend(
    planned: Planned, *, dry_run: bool = False, land_on: str | None = None
) -> CheckedBackend:
    """The checked backend of an `fks run`: containers with `--sandbox`, else host processes
    (`land_on`: the branch the steps land on instead of the base, a pull request's)."""
    options = planned.options
    spec = BackendSpec(
        cwd=planned.cwd,
        agents=planned.agents,
        sandbox=planned.sandbox_settings() if options.sandbox else None,
        base=land_on or options.base,
        dry_run=dry_run,
        secret_files=files_read(
            planned.config.every_sandbox() if planned.config else (), project_root(planned.cwd)
        ),
    )
    return checked_backend(spec, planned.plan.steps)


# --- fks run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainEnd:
    """How an `fks run` ended: its record, the backend and reporter it ran with, and the
    chain's result (None: the run was interrupted, by `signal`)."""

    record: RunRecord
    backend: Backend
    reporter: Reporter
    result: ChainResult | None
    signal: str = "SIGINT"


def run_planned(
    planned: Planned,
    resumed: RunRecord | None,
    *,
    reporter_for: Callable[[CheckedBackend], Reporter],
    more: int = 0,
    pr: PrTarget | None = None,
) -> ChainEnd:
    """Run the planned chain from its backend to its record's end; `resumed` is the record of
    the run it continues, `reporter_for` how the run is shown once its backend is checked,
    `pr` where its landed branch goes as a pull request.

    The run holds its branch's lock while it goes; a new run that fails before its first
    iteration leaves no record. An interruption is an end, not an error."""
    notifier = notify_events.configured(planned.config)
    checked = chain_backend(planned, land_on=pr.branch if pr else None)
    backend, reporter = checked.backend, reporter_for(checked)
    store = RunStore(project_root(planned.cwd))
    exclude_forge_dir(store.project)
    with signals_as_interrupts(), _run_lock(planned, store, backend) as lock:
        active = _open_chain_record(store, planned, resumed)
        _announce(active, lock, reporter, resumed=resumed is not None)
        try:
            result = _run_chain(planned, backend, active, reporter, more)
            if pr is not None and any(step.merged for step in active.record.steps):
                _open_pr(pr, store.project, active, reporter, notifier)
        except (Interrupted, KeyboardInterrupt) as exc:
            name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            notify_events.run_ended(notifier, active, store.project, reporter.warn)
            return ChainEnd(active.record, backend, reporter, None, name)
        except Exception:
            if resumed is None and not any(s.iterations for s in active.record.steps):
                store.discard(active.record.id)  # nothing started, so nothing is kept
            elif active.record.ended is not None:
                notify_events.run_ended(notifier, active, store.project, reporter.warn)
            raise
        else:
            notify_events.run_ended(notifier, active, store.project, reporter.warn)
        finally:
            reporter.close()
    return ChainEnd(active.record, backend, reporter, result)


def _run_chain(
    planned: Planned, backend: Backend, run: ActiveRun, reporter: Reporter, more: int
) -> ChainResult:
    """The chain's steps inside the backend's session; the record says how the chain ended."""
    from sandbox_runner.steps.chain import chain_options, run_chain
    from sandbox_runner.steps.runner import open_session

    with open_session(backend, run, reporter):
        result = run_chain(
            planned.plan,
            backend=backend,
            reporter=reporter,
            run=run,
            options=chain_options(planned, more=more),
        )
        last = result.steps[-1].outcome.reason if result.steps else None
        run.finish(
            success=result.success,
            failed_at=result.failed_at,
            reason=None if result.success else last,
        )
    return result


def _open_pr(
    pr: PrTarget, project: Path, run: ActiveRun, reporter: Reporter, notifier: Notifier
) -> None:
    """Push the landed branch and open (or update) its pull request, and say so (`notify`'s
    `pr`); a failure is one line and the record's, never the run's end."""
    from sandbox_runner.pulls.for_run import describe, publish_run

    pull = publish_run(pr, project=project, record=run.record, notice=reporter.info)
    run.set_pr(pull)
    failed, line = describe(pull)
    (reporter.warn if failed else reporter.info)(line)
    if pull.url and not failed:
        title = f"{run.record.id}: {pull.head} into {pull.base}"
        notify_events.pull_request(notifier, run, url=pull.url, title=title, say=reporter.warn)


def _run_lock(
    planned: Planned, store: RunStore, backend: Backend
) -> AbstractContextManager[RunLocks]:
    """The lock of the branch the steps land on; a run in place also holds its checkout's and
    that of the branch checked out there, which it commits on (so no sandboxed chain or
    `fks forge run` lands on that branch meanwhile)."""
    bases: list[str | None] = [backend.base_branch]
    if backend.base_branch is None and (branch := current_branch(store.project)) is not None:
        bases.insert(0, branch)
    return run_locks(
        store.project, bases, run_label=planned.options.chain or planned.options.dsl or ""
    )


def _open_chain_record(store: RunStore, planned: Planned, resumed: RunRecord | None) -> ActiveRun:
    if resumed is None:
        steps = [
            StepRecord(index=i, agent=s.agent, iterations_max=s.iterations, loop=s.loop)
            for i, s in enumerate(planned.plan.steps, start=1)
        ]
        return store.create(_new_record(planned.cwd, _masked_options(planned), steps))
    active = store.open(resumed)
    active.reopen()
    return active


def _announce(active: ActiveRun, lock: RunLocks, reporter: Reporter, *, resumed: bool) -> None:
    lock.set_run(active.record.id)
    if lock.reclaimed_from and lock.reclaimed_from != active.record.id:
        reporter.info(f"Reclaimed the lock of run {lock.reclaimed_from}, whose process is gone")
    reporter.info(f"Run {active.record.id}" + (" (resumed)" if resumed else ""))


def _masked_options(planned: Planned) -> RunOptions:
    """The options as recorded: credential values that appear in them are masked."""
    from sandbox_runner.steps.chain import chain_options

    masker = Masker(chain_options(planned).secrets)
    if not masker:
        return planned.options
    raw = planned.options.model_dump_json()
    return RunOptions.model_validate_json(masker.mask_text(raw))


def _new_record(
    cwd: Path,
    options: RunOptions,
    steps: list[StepRecord] | None = None,
    base: tuple[str | None, str | None] = (None, None),
) -> RunRecord:
    """The record of a run starting now, in this process (`base`: its branch and commit)."""
    return RunRecord(
        id=new_run_id(),
        started=now(),
        pid=os.getpid(),
        cwd=str(cwd),
        options=options,
        steps=steps or [],
        base_branch=base[0],
        base_commit=base[1],
    )


# --- a forge task ----------------------------------------------------------------------------


class TaskSide(Protocol):
    """What a forge task's run tells the task it runs for, and asks it."""

    def recorded(self, run_id: str) -> None:
        """The run's record was made."""
        ...

    def discarded(self, run_id: str) -> None:
        """It was removed again: the run failed before its first stage."""
        ...

    def outcome(self) -> tuple[bool, str | None]:
        """Whether the task is complete, else why not (asked when the run ends normally)."""
        ...


@dataclass(frozen=True)
class TaskRun:
    """A forge task's run in this process: its record, and the backend its stages run on."""

    run: ActiveRun
    backend: Backend
    reporter: Reporter

    def stage(
        self, step: Step, prompt: PromptSource, settings: StepSettings
    ) -> tuple[StepRecord, StepOutcome]:
        """Run one stage's agent as the run's next step."""
        from sandbox_runner.steps.runner import run_step

        record = self.run.add_step(step.agent)
        outcome = run_step(
            step,
            prompt,
            record,
            backend=self.backend,
            reporter=self.reporter,
            run=self.run,
            settings=settings,
        )
        return record, outcome


@contextmanager
def task_run(
    spec: BackendSpec,
    *,
    project: Path,
    options: RunOptions,
    base: tuple[str | None, str | None],
    reporter: Reporter,
    task: TaskSide,
) -> Iterator[TaskRun]:
    """A forge task's run: its backend (for every agent of `spec`) checked, its record (in
    `project`, starting at `base`: branch and commit), the backend's session around the stages.

    Leaving it ends the record: as `task.outcome()` says, or interrupted, or failed on the
    error; a run that fails before its first stage leaves no record."""
    from sandbox_runner.steps.runner import open_session

    checked = checked_backend(spec, [Step(agent=name) for name in spec.agents])
    store = RunStore(project)
    active = store.create(_new_record(project, options, base=base))
    task.recorded(active.record.id)
    try:
        with open_session(checked.backend, active, reporter):
            yield TaskRun(active, checked.backend, reporter)
    except (Interrupted, KeyboardInterrupt):
        active.end(Status.INTERRUPTED, IterationEnd.INTERRUPTED)
        raise
    except Exception as exc:
        if not active.record.steps:
            store.discard(active.record.id)
            task.discarded(active.record.id)
        else:
            active.end(Status.FAILED, str(exc)[:500])
        raise
    else:
        complete, why = task.outcome()
        active.finish(success=complete, failed_at=None, reason=None if complete else why)
