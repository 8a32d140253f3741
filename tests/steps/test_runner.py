"""The one step runner (chain steps and forge stages): what it gives the agent and what the run
record says of the step afterwards, when it completes, fails or is interrupted."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from fks_testing.fakes import FakeRun, FakeSandbox

from sandbox_runner.backends.api import (
    BranchBinding,
    ExecSpec,
    IterationTraffic,
    Landed,
    Notices,
    PreparedStep,
    RunPlace,
    StepSoFar,
)
from sandbox_runner.backends.local import LocalBackend
from sandbox_runner.console.output import PlainReporter
from sandbox_runner.errors import Interrupted
from sandbox_runner.git.landing import Landing
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.record import RunOptions, RunRecord, StepRecord, now
from sandbox_runner.records.store import ActiveRun, RunStore, new_run_id
from sandbox_runner.results.ended import StepOutcome
from sandbox_runner.results.reported import DeniedRecord
from sandbox_runner.steps.runner import StepSettings, open_session, run_step

MARK = "FORKHESTRA_COMPLETE\n"
PROMPT = PromptSource(origin="--prompt", text="go")


def _active_run(project: Path) -> ActiveRun:
    record = RunRecord(
        id=new_run_id(), started=now(), pid=os.getpid(), cwd=str(project), options=RunOptions()
    )
    return RunStore(project).create(record)


def _reporter() -> PlainReporter:
    return PlainReporter(out=io.StringIO(), agent_out=io.BytesIO())


def _saved_step(run: ActiveRun) -> StepRecord:
    """The step as `run.json` on disk says (what `fks show` and `--resume` read)."""
    return RunStore(Path(run.record.cwd)).load(run.record.id).steps[0]


def test_a_step_runs_with_the_settings_arguments_and_environment(tmp_path: Path) -> None:
    sandbox = FakeSandbox([FakeRun("work\n"), FakeRun("done\n" + MARK)])
    backend = LocalBackend(cwd=tmp_path, agents={}, sandbox=sandbox)
    run = _active_run(tmp_path)
    record = run.add_step("echo")
    outcome = run_step(
        Step(agent="echo", iterations=3, loop=True, args=("--own",)),
        PROMPT,
        record,
        backend=backend,
        reporter=_reporter(),
        run=run,
        settings=StepSettings(args=("--global",), env={"FKS_X": "1"}, no_progress_limit=0),
    )
    assert outcome.complete and outcome.iterations_used == 2
    assert sandbox.started[0].argv[1:] == ("--global", "--own", "go")
    assert all(spec.env.get("FKS_X") == "1" for spec in sandbox.started)
    saved = _saved_step(run)
    assert (saved.status, saved.reason, len(saved.iterations)) == ("complete", "marker", 2)


def test_extra_iterations_let_a_step_run_past_its_own_limit(tmp_path: Path) -> None:
    sandbox = FakeSandbox([FakeRun("a\n"), FakeRun("b\n"), FakeRun("c\n")])
    run = _active_run(tmp_path)
    outcome = run_step(
        Step(agent="echo", iterations=1, loop=True),
        PROMPT,
        run.add_step("echo"),
        backend=LocalBackend(cwd=tmp_path, agents={}, sandbox=sandbox),
        reporter=_reporter(),
        run=run,
        settings=StepSettings(extra_iterations=2, no_progress_limit=0),
    )
    assert not outcome.complete and outcome.iterations_used == 3
    assert _saved_step(run).status == "incomplete"


class _BrokenBackend(LocalBackend):
    def __init__(self, cwd: Path, error: BaseException) -> None:
        super().__init__(cwd=cwd, agents={}, sandbox=FakeSandbox([]))
        self._error = error

    def step(
        self, index: int, step: Step, record: StepRecord
    ) -> AbstractContextManager[PreparedStep]:
        raise self._error


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (RuntimeError("workspace gone"), "failed", "workspace gone"),
        (Interrupted("SIGTERM"), "interrupted", "interrupted"),
    ],
)
def test_a_step_that_fails_or_is_interrupted_is_recorded_so(
    tmp_path: Path, error: BaseException, status: str, reason: str
) -> None:
    run = _active_run(tmp_path)
    with pytest.raises(type(error)):
        run_step(
            Step(agent="echo"),
            PROMPT,
            run.add_step("echo"),
            backend=_BrokenBackend(tmp_path, error),
            reporter=_reporter(),
            run=run,
            settings=StepSettings(),
        )
    saved = _saved_step(run)
    assert (saved.status, saved.reason) == (status, reason)


class _BranchBackend(LocalBackend):
    """A backend that puts each step on a branch and lands it there: it writes no record, it
    returns what happened."""

    def __init__(self, cwd: Path, sandbox: FakeSandbox) -> None:
        super().__init__(cwd=cwd, agents={}, sandbox=sandbox)

    @contextmanager
    def session(
        self, run_id: str, reporter: Notices, *, resumed: bool = False
    ) -> Iterator[RunPlace]:
        yield RunPlace(base_branch="main", base_commit="b0", engine="tcp://far:2375")

    @contextmanager
    def step(self, index: int, step: Step, record: StepSoFar) -> Iterator[PreparedStep]:
        late = IterationTraffic(denied=(DeniedRecord(host="x.test", count=2),), denied_more=1)

        def land(outcome: StepOutcome) -> Landed:
            return Landed(outcome, head="h1", landing=Landing(merged=True, commit="m1"), late=late)

        binding = BranchBinding(str(self._cwd), "main", f"fks/s{index}", "vol-1", "b0")
        yield PreparedStep(
            agent=self.resolve(step),
            sandbox=self._sandbox,
            land=land,
            binding=binding,
            head=lambda: "h-stopped",
        )


def test_what_the_backend_returns_is_written_to_the_run_record(tmp_path: Path) -> None:
    backend = _BranchBackend(tmp_path, FakeSandbox([FakeRun("done\n" + MARK)]))
    run = _active_run(tmp_path)
    with open_session(backend, run, _reporter()):
        run_step(
            Step(agent="echo"),
            PROMPT,
            run.add_step("echo"),
            backend=backend,
            reporter=_reporter(),
            run=run,
            settings=StepSettings(),
        )
    saved = RunStore(tmp_path).load(run.record.id)
    assert (saved.base_branch, saved.base_commit, saved.engine) == ("main", "b0", "tcp://far:2375")
    step = saved.steps[0]
    assert (step.branch, step.base_branch, step.workspace, step.start_commit) == (
        "fks/s1",
        "main",
        "vol-1",
        "b0",
    )
    assert (step.head_commit, step.merged, step.merge_commit) == ("h1", True, "m1")
    last = step.iterations[-1]
    assert [(d.host, d.count) for d in last.denied] == [("x.test", 2)] and last.denied_more == 1


def test_an_interrupted_step_records_the_tip_its_backend_saved(tmp_path: Path) -> None:
    def interrupted(spec: ExecSpec) -> FakeRun:
        raise Interrupted("SIGINT")

    run = _active_run(tmp_path)
    with pytest.raises(Interrupted):
        run_step(
            Step(agent="echo"),
            PROMPT,
            run.add_step("echo"),
            backend=_BranchBackend(tmp_path, FakeSandbox([interrupted])),
            reporter=_reporter(),
            run=run,
            settings=StepSettings(),
        )
    saved = _saved_step(run)
    assert (saved.status, saved.branch, saved.head_commit) == ("interrupted", "fks/s1", "h-stopped")
