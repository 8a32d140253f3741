from __future__ import annotations

import pytest

from sandbox_runner.dsl import Step, parse_dsl
from sandbox_runner.errors import UsageError


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
    ],
)
def test_rejects(dsl: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_dsl(dsl)
