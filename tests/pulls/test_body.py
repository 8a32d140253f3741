"""What fks writes into a pull request from text an agent could have written: it pings nobody,
loads nothing, runs no HTML, shows no escape or bidi trick, and stays under GitHub's limit."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from sandbox_runner.pulls.body import BODY_LIMIT, Commit, code, reproduce, run_body, title_text
from sandbox_runner.records.record import RunOptions, RunRecord, StepRecord

HOSTILE = [
    "ping @acme/security-team and @octocat",
    "![x](http://attacker.example/pixel.png) [click](javascript:alert(1))",
    "<img src=http://attacker.example/x.png><script>alert(1)</script><details open>",
    "\x1b]0;title\x07\x1b[31mred\x1b[0m \x9b2J",
    "evil\u202egpj.sh \u2066isolate\u2069",
    "``` fence ` tick | pipe",
    "x" * (1 << 20),
]
_SPANS = re.compile(r"(`+)(?:(?!\1).)*?\1", re.DOTALL)


def _outside_code(body: str) -> str:
    """The body with its code spans and fenced blocks removed: what GitHub renders as Markdown."""
    body = re.sub(r"^```+.*?^```+$", "", body, flags=re.MULTILINE | re.DOTALL)
    return _SPANS.sub("", body)


def _record(agent_text: str) -> RunRecord:
    step = StepRecord(index=1, agent=agent_text, iterations_max=3, loop=True, reason=agent_text)
    return RunRecord(
        id="20260101-000000-abcd",
        started=datetime.now(UTC),
        pid=1,
        cwd="/tmp",
        options=RunOptions(dsl=agent_text),
        steps=[step],
        base_branch=agent_text,
        reason=agent_text,
    )


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_pings_nobody_and_loads_nothing(text: str) -> None:
    commits = [Commit("abc1234", text)] * 150
    body = run_body(_record(text), commits, True, reproduce(_record(text)))
    assert len(body) <= BODY_LIMIT
    rendered = _outside_code(body)
    assert "@" not in rendered and "<img" not in rendered and "<script" not in rendered
    assert "](" not in rendered and "attacker" not in rendered
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", body)
    assert rendered.count("<") == rendered.count("<sub>") + rendered.count("</sub>")


def test_a_code_span_cannot_be_closed_from_inside() -> None:
    span = code("a `` b ``` c")
    assert span.startswith("````") and span.endswith("````")
    assert _outside_code(f"x {span} y") == "x  y"


def test_titles_ping_nobody() -> None:
    title = title_text("fks: @acme/team " + "y" * 10_000)
    assert "@acme" not in title and len(title) <= 256  # GitHub: 256 at most
