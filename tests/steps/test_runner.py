"""The one step runner (chain steps and forge stages): what it gives the agent and what the run
record says of the step afterwards, when it completes, fails or is interrupted."""

from __future__ import annotations

import io
import os
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from fks_testing.fakes import FakeRun, FakeSandbox

from sandbox_runner.backends.api import PreparedStep
from sandbox_runner.backends.local import LocalBackend
from sandbox_runner.console.output import PlainReporter
from sandbox_runner.errors import Interrupted
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.record import RunOptions, RunRecord, StepRecord, now
from sandbox_runner.records.store import ActiveRun, RunStore, new_run_id
from sandbox_runner.steps.runner import StepSettings, run_step

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
