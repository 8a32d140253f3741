"""Parse the `claude -p --output-format stream-json --verbose` output into a few typed events.

Completion is read only from what the main agent says (its text blocks and the final result), never
from tool inputs or tool output: an agent that `cat`s a prompt containing the marker is not done.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypeAlias

from sandbox_runner.bounded import load_json
from sandbox_runner.console.units import usd
from sandbox_runner.plan.prompts import MARKER
from sandbox_runner.steps.guards import RunningCost

SUMMARY_WIDTH = 100
LINE_BYTES = 8 * 1024 * 1024
"""Bytes of one line read as an event at most (the monitor drops longer lines before)."""
# What the CLI reports for a request the API refused as rate limited or overloaded.
RATE_LIMIT_STATUSES = frozenset({429, 529})
_PATH_TOOLS = {
    "Edit": "file_path",
    "Write": "file_path",
    "Read": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
_FIELD_TOOLS = {
    "Grep": "pattern",
    "Glob": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Agent": "description",
    "Task": "description",
}
_SYNTHETIC_MODEL = "<synthetic>"


@dataclass(frozen=True)
class ToolCall:
    """The agent called a tool; `summary` is one abbreviated line such as `Bash: make test`."""

    name: str
    summary: str


@dataclass(frozen=True)
class AssistantText:
    """A text block the agent wrote."""

    text: str


@dataclass(frozen=True)
class Init:
    """The CLI started a session."""

    session_id: str | None
    model: str | None


@dataclass(frozen=True)
class Result:
    """The last line of a run: how it ended, what it cost.

    `text` is the agent's final text, or the CLI's error messages when it has none. An API failure
    shows as subtype "success" with `is_error` and the HTTP status in `api_error_status`.
    """

    subtype: str
    is_error: bool
    text: str | None
    num_turns: int | None
    duration_ms: int | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    session_id: str | None
    api_error_status: int | None
    structured_output: dict[str, Any] | None = None
    """The answer of a `--json-schema` run (the `StructuredOutput` tool's input), if it was an object."""

    @property
    def rate_limited(self) -> bool:
        """True when the run failed on a 429 (rate limited) or 529 (overloaded) API answer."""
        if not self.is_error:
            return False
        if self.api_error_status is not None:
            return self.api_error_status in RATE_LIMIT_STATUSES
        text = (self.text or "").lower()
        return "overloaded" in text or "rate limit" in text or "rate_limit" in text

    def summary_line(self) -> str:
        """E.g. `result: success, 4 turns, 12.3s, $0.0123`."""
        head = f"result: {self.subtype}"
        if self.is_error and self.subtype == "success":
            head = "result: error"
        if self.api_error_status is not None:
            head += f" (API {self.api_error_status}{', rate limited' if self.rate_limited else ''})"
        parts = [head]
        if self.num_turns is not None:
            parts.append(f"{self.num_turns} turn{'' if self.num_turns == 1 else 's'}")
        if self.duration_ms is not None:
            parts.append(f"{self.duration_ms / 1000:.1f}s")
        if self.cost_usd is not None:
            parts.append(usd(self.cost_usd))
        return ", ".join(parts)


Event: TypeAlias = ToolCall | AssistantText | Init | Result


class StreamJsonParser:
    """Feed stdout lines one at a time; read `marker_seen`, `result` and `session_id` as you go."""

    def __init__(self) -> None:
        self.marker_seen = False
        self.result: Result | None = None
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.running_cost = RunningCost()
        """What the assistant messages so far cost at least (before the result says)."""

    def feed_line(self, line: str) -> list[Event]:
        """Events for one line; lines that are not stream-json or of unknown types give none, nor
        do lines too large or too deeply nested to read (they stay in the log as they are)."""
        try:
            obj = load_json(line, max_bytes=LINE_BYTES)
        except ValueError:
            return []
        if not isinstance(obj, dict):
            return []
        try:
            return self._event(obj)
        except (TypeError, ValueError, AttributeError):
            # Malformed but JSON: a line we do not understand must not stop the run.
            return []

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "init":
            self.session_id = _str(obj.get("session_id")) or self.session_id
            self.cwd = _str(obj.get("cwd"))
            return [Init(session_id=_str(obj.get("session_id")), model=_str(obj.get("model")))]
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "result":
            return [self._result(obj)]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[Event]:
        message = obj.get("message")
        if not isinstance(message, dict):
            return []
        self.running_cost.message(message)
        # Subagents' messages and the CLI's own synthetic "API Error" messages are not the agent's
        # final word, so they never count as completion.
        counts = obj.get("parent_tool_use_id") is None and message.get("model") != _SYNTHETIC_MODEL
        events: list[Event] = []
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text = block["text"]
                if counts and has_marker(text):
                    self.marker_seen = True
                events.append(AssistantText(text=text))
            elif block.get("type") == "tool_use":
                name = str(block.get("name") or "?")
                tool_input = block.get("input")
                tool_input = tool_input if isinstance(tool_input, dict) else {}
                events.append(ToolCall(name=name, summary=tool_summary(name, tool_input, self.cwd)))
        return events

    def _result(self, obj: dict[str, Any]) -> Result:
        usage = obj.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        text = _str(obj.get("result"))
        errors = obj.get("errors")
        if text is None and isinstance(errors, list) and errors:
            # error_max_turns and friends carry no result text, only these messages.
            text = "; ".join(str(error) for error in errors)
        result = Result(
            subtype=_str(obj.get("subtype")) or "unknown",
            is_error=bool(obj.get("is_error")),
            text=text,
            num_turns=_int(obj.get("num_turns")),
            duration_ms=_int(obj.get("duration_ms")),
            cost_usd=_float(obj.get("total_cost_usd")),
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            session_id=_str(obj.get("session_id")),
            api_error_status=_int(obj.get("api_error_status")),
            structured_output=_object(obj.get("structured_output")),
        )
        if text is not None and not result.is_error and has_marker(text):
            self.marker_seen = True
        self.result = result
        self.session_id = result.session_id or self.session_id
        return result


def has_marker(text: str) -> bool:
    """True when a line of `text`, stripped, is exactly the marker (not a mention in a sentence)."""
    return any(line.strip() == MARKER for line in text.splitlines())


def tool_summary(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> str:
    """One line saying what a tool call does: `Bash: git commit -m 'x'`, `Edit: src/app.py`."""
    detail: str
    if name == "Bash" and isinstance(tool_input.get("command"), str):
        lines = tool_input["command"].strip().splitlines() or [""]
        detail = lines[0] + (" …" if len(lines) > 1 else "")
    elif name in _PATH_TOOLS and isinstance(tool_input.get(_PATH_TOOLS[name]), str):
        detail = _relative(tool_input[_PATH_TOOLS[name]], cwd)
    elif name in _FIELD_TOOLS and isinstance(tool_input.get(_FIELD_TOOLS[name]), str):
        detail = tool_input[_FIELD_TOOLS[name]]
    else:
        detail = json.dumps(tool_input, separators=(",", ":"), ensure_ascii=False, default=str)
    return _abbreviate(f"{name}: {' '.join(detail.split())}")


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Whole lines (decoded, without the newline) from arbitrarily split byte chunks."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            yield raw.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", "replace")


def _relative(path: str, cwd: str | None) -> str:
    if cwd and PurePath(path).is_absolute():
        try:
            return str(PurePath(path).relative_to(cwd))
        except ValueError:
            return path
    return path


def _abbreviate(text: str) -> str:
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
