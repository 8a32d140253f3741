"""The stream-json parser, on output recorded from the real claude CLI (tests/data/streamjson)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox_runner.agentclis.claude import StreamJsonParser, iter_lines
from sandbox_runner.agentclis.events import (
    AssistantText,
    Event,
    Init,
    Result,
    ToolCall,
    tool_summary,
)
from sandbox_runner.plan.prompts import MARKER

FIXTURES = Path(__file__).parents[1] / "data" / "streamjson"


def parse(name: str) -> tuple[StreamJsonParser, list[Event]]:
    parser = StreamJsonParser()
    events: list[Event] = []
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        events += parser.feed_line(line)
    return parser, events


def feed(*objects: Any) -> tuple[StreamJsonParser, list[Event]]:
    parser = StreamJsonParser()
    events: list[Event] = []
    for obj in objects:
        events += parser.feed_line(obj if isinstance(obj, str) else json.dumps(obj))
    return parser, events


def assistant(*content: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    message = {"model": "claude-x", "role": "assistant", "content": list(content)}
    return {"type": "assistant", "message": message, "parent_tool_use_id": parent}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def result(**fields: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, **fields}


# -- recorded from the real CLI -----------------------------------------------------------------


def test_text_run_completes() -> None:
    parser, events = parse("text_complete")
    init = events[0]
    assert isinstance(init, Init)
    assert init.model and init.session_id
    assert events[1] == AssistantText(f"All done.\n{MARKER}")
    assert parser.marker_seen
    assert parser.result is not None
    assert parser.result.subtype == "success"
    assert not parser.result.is_error
    assert parser.result.cost_usd and parser.result.cost_usd > 0
    assert parser.result.input_tokens and parser.result.output_tokens
    assert parser.session_id == init.session_id == parser.result.session_id
    assert not parser.result.rate_limited


def test_tool_calls_are_summarised() -> None:
    parser, events = parse("tool_bash")
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [ToolCall("Bash", "Bash: echo hi > f.txt"), ToolCall("Bash", "Bash: cat f.txt")]
    assert parser.result is not None
    assert parser.result.num_turns == 3
    assert parser.marker_seen


def test_marker_in_tool_output_does_not_count() -> None:
    parser, events = parse("cat_marker")
    assert ToolCall("Bash", "Bash: cat PROMPT.md") in events
    # The marker is in the recorded tool_result, and mentioned in a sentence by the agent.
    assert MARKER in (FIXTURES / "cat_marker.jsonl").read_text().split('"type":"user"')[1]
    assert not parser.marker_seen
    assert parser.result is not None
    assert not parser.result.is_error


def test_marker_on_its_own_line_in_a_longer_text_counts() -> None:
    parser, _ = parse("marker_in_text")
    assert parser.marker_seen


def test_max_turns() -> None:
    parser, _ = parse("max_turns")
    assert parser.result is not None
    assert parser.result.subtype == "error_max_turns"
    assert parser.result.is_error
    assert parser.result.text == "Reached maximum number of turns (1)"
    assert not parser.result.rate_limited
    assert not parser.marker_seen
    assert parser.result.summary_line().startswith("result: error_max_turns, 2 turns, ")


def test_a_result_kind_that_is_no_kind_is_unknown() -> None:
    """fks prints the result's kind on its own `[fks] result:` line: only a word of Claude's
    form passes (an agent writes the stream)."""
    for subtype in ("success\n[fks] Chain complete (1/1 steps)", "a" * 41, "Merged it", 3):
        parser, _ = feed({"type": "result", "subtype": subtype, "num_turns": 1})
        assert parser.result is not None and parser.result.subtype == "unknown", subtype
    parser, _ = feed({"type": "result", "subtype": "error_during_execution"})
    assert parser.result is not None and parser.result.subtype == "error_during_execution"


@pytest.mark.parametrize(
    ("name", "status", "rate_limited"),
    [
        ("rate_limit_429", 429, True),
        ("overloaded_529", 529, True),
        ("server_error_500", 500, False),
    ],
)
def test_api_errors(name: str, status: int, rate_limited: bool) -> None:
    parser, events = parse(name)
    final = parser.result
    assert final is not None
    assert (final.subtype, final.is_error, final.api_error_status) == ("success", True, status)
    assert final.rate_limited is rate_limited
    assert final.text and final.text.startswith("API Error")
    # The CLI's synthetic "API Error" message is shown but is not the agent speaking.
    assert any(isinstance(e, AssistantText) and e.text.startswith("API Error") for e in events)
    assert not parser.marker_seen
    assert f"(API {status}" in final.summary_line()


# -- hand-made lines ----------------------------------------------------------------------------


def test_garbage_and_unknown_events_are_ignored() -> None:
    parser, events = feed(
        "",
        "not json at all",
        "[1, 2]",
        '{"type": "assistant", "message": "oops"}',
        '{"type": "assistant", "message": {"content": [null, 3, {"type": "text"}]}}',
        '{"type": "result", "num_turns": "many", "usage": []}',
        {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}},
        {"type": "stream_event", "event": {"type": "content_block_delta", "text": MARKER}},
        {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 529},
        '{"type": "assistant", "message": {"content": [{"type": "text", "text": "trunc',
    )
    assert len(events) == 1
    assert isinstance(events[0], Result)
    assert events[0].subtype == "unknown"
    assert events[0].num_turns is None
    assert not parser.marker_seen


def test_marker_inside_a_sentence_does_not_count() -> None:
    parser, _ = feed(
        assistant(text(f"I will print {MARKER} when done.")),
        result(result=f"Say {MARKER} later"),
    )
    assert not parser.marker_seen


def test_marker_in_the_result_text_counts() -> None:
    parser, _ = feed(result(result=f"done\n{MARKER}\n"))
    assert parser.marker_seen


def test_marker_in_tool_input_init_or_error_result_does_not_count() -> None:
    parser, events = feed(
        {"type": "system", "subtype": "init", "session_id": "s", "cwd": MARKER},
        assistant({"type": "tool_use", "name": "Bash", "input": {"command": f"echo\n{MARKER}"}}),
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": MARKER}]}},
        assistant(text(MARKER), parent="toolu_1"),  # a subagent, not the agent itself
        result(is_error=True, result=MARKER),
    )
    assert ToolCall("Bash", "Bash: echo …") in events
    assert not parser.marker_seen


def test_is_error_result_without_status_uses_the_text_for_rate_limits() -> None:
    overloaded = Result("success", True, "API Error: Overloaded", 1, 10, 0.0, 0, 0, None, None)
    timed_out = Result("success", True, "Request timed out", 1, 10, 0.0, 0, 0, None, None)
    assert overloaded.rate_limited
    assert not timed_out.rate_limited


def test_summary_line() -> None:
    done = Result("success", False, "ok", 4, 12_345, 0.0123, 10, 20, "s", None)
    assert done.summary_line() == "result: success, 4 turns, 12.3s, $0.0123"
    failed = Result("success", True, "API Error", 1, 500, 0, 0, 0, "s", 429)
    assert failed.summary_line() == "result: error (API 429, rate limited), 1 turn, 0.5s, $0.0000"


@pytest.mark.parametrize(
    ("name", "tool_input", "summary"),
    [
        ("Bash", {"command": "git commit -m 'x'"}, "Bash: git commit -m 'x'"),
        ("Edit", {"file_path": "/repo/src/app.py", "old_string": "a"}, "Edit: src/app.py"),
        ("Write", {"file_path": "/elsewhere/a.txt"}, "Write: /elsewhere/a.txt"),
        ("Read", {"file_path": "README.md"}, "Read: README.md"),
        ("NotebookEdit", {"notebook_path": "/repo/n.ipynb"}, "NotebookEdit: n.ipynb"),
        ("Grep", {"pattern": "def main", "path": "src"}, "Grep: def main"),
        ("Glob", {"pattern": "**/*.py"}, "Glob: **/*.py"),
        ("TodoWrite", {"todos": [{"content": "a"}]}, 'TodoWrite: {"todos":[{"content":"a"}]}'),
        ("Bash", {}, "Bash: {}"),
    ],
)
def test_tool_summary(name: str, tool_input: dict[str, Any], summary: str) -> None:
    assert tool_summary(name, tool_input, "/repo") == summary


def test_tool_summary_is_one_abbreviated_line() -> None:
    summary = tool_summary("Bash", {"command": "x" * 300 + "\nsecond line"})
    assert len(summary) == 100
    assert summary.endswith("…")
    assert "\n" not in tool_summary("Mcp", {"text": "a\nb"})


def test_paths_are_relative_to_the_session_cwd() -> None:
    _, events = feed(
        {"type": "system", "subtype": "init", "session_id": "s", "cwd": "/w"},
        assistant({"type": "tool_use", "name": "Edit", "input": {"file_path": "/w/src/a.py"}}),
    )
    assert events[1] == ToolCall("Edit", "Edit: src/a.py")


def test_iter_lines_joins_split_chunks() -> None:
    chunks = [b'{"a":', b' 1}\n{"b"', b": 2}\r\n\xe2\x9c", b"\x93 tail"]
    assert list(iter_lines(chunks)) == ['{"a": 1}', '{"b": 2}', "✓ tail"]
