"""The iteration loop on the scripted FakeSandbox: classification, limits, breakers, back-off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.fakes import FakeRun, FakeSandbox, FakeScriptExhausted

from sandbox_runner.console.output import PlainReporter
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.record import StepRecord
from sandbox_runner.steps.loop import StepContext, StepLoop

MARK = "FORKHESTRA_COMPLETE\n"


def loop(
    tmp_path: Path,
    script: list[FakeRun],
    *,
    iterations: int = 5,
    looping: bool = True,
    claude: bool = False,
    **kw: object,
) -> tuple[StepLoop, FakeSandbox]:
    sandbox = FakeSandbox(script)
    kind = "claude-agent" if claude else "binary"
    agent = AgentCommand(name="a", kind=kind, program="a", cwd=tmp_path)
    out = (tmp_path / "out.txt").open("w")
    ctx = StepContext(
        step=Step("a", iterations, looping),
        agent=agent,
        prompt=PromptSource(origin="--prompt", text="go"),
        sandbox=sandbox,
        reporter=PlainReporter(out=out, agent_out=(tmp_path / "agent.txt").open("wb")),
        record=StepRecord(index=1, agent="a", iterations_max=iterations, loop=looping),
        **kw,  # type: ignore[arg-type]
    )
    return StepLoop(ctx), sandbox


def test_marker_on_third_iteration(tmp_path: Path) -> None:
    step, sandbox = loop(
        tmp_path, [FakeRun("a\n"), FakeRun("b\n", exit_code=1), FakeRun("c\n" + MARK)]
    )
    outcome = step.run()
    assert outcome.complete and outcome.reason == "marker" and outcome.iterations_used == 3
    assert [r.reason for r in outcome.iterations] == ["no_marker", "exit_1", "marker"]
    assert sandbox.started[0].argv == ("a", "go")


def test_max_iterations(tmp_path: Path) -> None:
    step, _ = loop(tmp_path, [FakeRun("x\n")] * 2, iterations=2, no_progress_limit=0)
    outcome = step.run()
    assert (
        not outcome.complete and outcome.reason == "max_iterations" and outcome.iterations_used == 2
    )


def test_script_running_out_is_a_named_error(tmp_path: Path) -> None:
    step, _ = loop(tmp_path, [FakeRun("x\n")], iterations=3, no_progress_limit=0)
    with pytest.raises(FakeScriptExhausted, match="no scripted run left"):
        step.run()


def test_once_completes_without_marker_unless_timed_out(tmp_path: Path) -> None:
    step, _ = loop(tmp_path, [FakeRun("x\n", exit_code=3)], looping=False)
    assert step.run().complete
    step, _ = loop(
        tmp_path, [FakeRun("x\n", timed_out=True, exit_code=137)], looping=False, timeout=5
    )
    outcome = step.run()
    assert not outcome.complete and outcome.reason == "timeout"


def test_timeout_in_a_loop_counts_and_continues(tmp_path: Path) -> None:
    step, _ = loop(tmp_path, [FakeRun("", timed_out=True, exit_code=137), FakeRun(MARK)], timeout=1)
    outcome = step.run()
    assert outcome.complete and [r.reason for r in outcome.iterations] == ["timeout", "marker"]
    assert "timed out after 1s" in (outcome.iterations[0].note or "")


def test_no_progress_breaker(tmp_path: Path) -> None:
    step, _ = loop(
        tmp_path, [FakeRun("x\n")] * 5, iterations=9, progress=lambda: "same", no_progress_limit=3
    )
    outcome = step.run()
    assert outcome.reason == "no_progress" and outcome.iterations_used == 3


def test_progress_resets_the_breaker(tmp_path: Path) -> None:
    states = iter(["a", "b", "b", "c", "c", "c", "c", "c", "c", "c"])
    step, _ = loop(
        tmp_path,
        [FakeRun("x\n")] * 5,
        iterations=5,
        progress=lambda: next(states),
        no_progress_limit=2,
    )
    outcome = step.run()
    assert [r.changed for r in outcome.iterations] == [True, True, False, False]
    assert outcome.reason == "no_progress"


def test_repeated_error_breaker_needs_the_same_error(tmp_path: Path) -> None:
    same = FakeRun("", "fatal: boom\n", exit_code=2)
    step, _ = loop(
        tmp_path,
        [same, FakeRun("", "fatal: other\n", exit_code=2), same, same, same],
        iterations=9,
        no_progress_limit=3,
    )
    outcome = step.run()
    assert outcome.reason == "repeated_error" and outcome.iterations_used == 5


def test_budget_stops_the_loop(tmp_path: Path) -> None:
    spent = iter([False, True])
    step, _ = loop(
        tmp_path,
        [FakeRun("x\n")] * 3,
        iterations=5,
        no_progress_limit=0,
        over_budget=lambda: next(spent),
    )
    outcome = step.run()
    assert outcome.reason == "max_cost" and outcome.iterations_used == 2


def _result(**fields: object) -> str:
    base = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 2,
        "total_cost_usd": 0.01,
        "session_id": "s1",
        "result": "ok",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return json.dumps({**base, **fields}) + "\n"


def test_claude_rate_limit_backs_off_without_using_iterations(tmp_path: Path) -> None:
    limited = FakeRun(
        _result(is_error=True, api_error_status=429, result="API Error: 429"), exit_code=1
    )
    done = FakeRun(_result(result="done\nFORKHESTRA_COMPLETE"))
    step, _ = loop(
        tmp_path, [limited, limited, done], iterations=1, claude=True, rate_limit_min_wait=0
    )
    outcome = step.run()
    assert outcome.complete and outcome.iterations_used == 1
    assert [r.counted for r in outcome.iterations] == [False, False, True]
    assert [r.number for r in outcome.iterations] == [1, 1, 1]


def test_claude_rate_limit_gives_up_after_max_wait(tmp_path: Path) -> None:
    limited = FakeRun(
        _result(is_error=True, api_error_status=529, result="overloaded"), exit_code=1
    )
    step, _ = loop(
        tmp_path,
        [limited] * 2,
        iterations=1,
        claude=True,
        rate_limit_min_wait=0,
        rate_limit_max_wait=0,
    )
    outcome = step.run()
    assert not outcome.complete and outcome.iterations_used == 1 and outcome.iterations[-1].counted


def test_claude_stats_and_error_reasons(tmp_path: Path) -> None:
    step, _ = loop(
        tmp_path,
        [
            FakeRun(_result(subtype="error_max_turns", is_error=True, result=None), exit_code=1),
            FakeRun(_result(result="FORKHESTRA_COMPLETE")),
        ],
        claude=True,
    )
    outcome = step.run()
    first, second = outcome.iterations
    assert first.reason == "max_turns" and second.reason == "marker"
    assert second.claude is not None and second.claude.cost_usd == 0.01 and second.claude.turns == 2
    assert second.claude.input_tokens == 10 and second.claude.session_id == "s1"
