from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import one_line_error

from sandbox_runner.errors import UsageError
from sandbox_runner.plan.dsl import Step, parse_dsl


@pytest.mark.parametrize(
    ("dsl", "expected"),
    [
        ("agent", [Step("agent")]),
        ("agent:10", [Step("agent", 10, True)]),
        ("a -> b -> c", [Step("a"), Step("b"), Step("c")]),
        ("a -> b:10", [Step("a"), Step("b", 10, True)]),
        ("a:3->b:10", [Step("a", 3, True), Step("b", 10, True)]),
        ("fk:builder:3", [Step("fk:builder", 3, True)]),
        ("fk:builder", [Step("fk:builder")]),
        ("./bin/agent", [Step("./bin/agent")]),
        ("../proj/.claude/agents/x:5", [Step("../proj/.claude/agents/x", 5, True)]),
        ("  planner:3  ->  builder  ", [Step("planner", 3, True), Step("builder")]),
    ],
)
def test_parses(dsl: str, expected: list[Step]) -> None:
    assert parse_dsl(dsl) == expected


@pytest.mark.parametrize(
    ("dsl", "fragment"),
    [
        ("a:0", "positive integer"),
        ("a:1.5", "positive integer"),
        ("a:3x", "positive integer"),
        ("a:-2", "positive integer"),
        ("a ->", "empty step"),
        ("-> a", "empty step"),
        ("a -> -> b", "empty step"),
        ("", "empty DSL"),
        ("   ", "empty DSL"),
        (":3", "no agent name"),
        ("a:٣", "positive integer"),
        ("a:１", "positive integer"),
        ("a:10001", "at most 10,000"),
        ("a:" + "9" * 5000, "at most 10,000"),
        ("a\x1bb", "control character"),
        ("a -> b\tc:3", "control character"),
        ("a\x85b", "control character"),
        (" -> ".join(["a"] * 1001), "1,001 steps; at most 1,000"),
    ],
)
def test_rejects(dsl: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_dsl(dsl)


def test_bounds_are_allowed() -> None:
    steps = parse_dsl(" -> ".join(["a:10000"] * 1000))
    assert len(steps) == 1000 and steps[-1] == Step("a", 10_000, True)


def test_huge_dsl_is_refused_quickly() -> None:
    started = time.process_time()  # CPU time: other processes on a busy machine do not stretch it
    with pytest.raises(UsageError, match="at most 1,000"):
        parse_dsl("planner:3 -> " * 10_000 + "builder")
    with pytest.raises(UsageError, match="at most 1,000"):
        parse_dsl("->" * 1_000_000)
    with pytest.raises(UsageError, match="positive integer"):
        parse_dsl("a:" * 100_000 + "1x")
    assert time.process_time() - started < 5


@pytest.mark.parametrize(
    ("dsl", "fragment"),
    [
        ("->", "empty step in DSL"),
        ("-> builder", "empty step in DSL"),
        ("builder:١٠", "iterations must be a positive integer"),
        ("build\x1b[31mer", "control character"),
        ("builder:20000", "at most 10,000"),
    ],
)
def test_dsl_errors_on_the_command_line(project: Path, cli: Any, dsl: str, fragment: str) -> None:
    one_line_error(cli("run", dsl), fragment)


def test_unknown_option_is_still_named(project: Path, cli: Any) -> None:
    one_line_error(cli("run", "builder", "--bogus"), "no such option: --bogus")
