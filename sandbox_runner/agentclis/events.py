"""The neutral events every agent CLI's stream is read into: what the model said, the tools it
called and what they returned, usage, and the result that ends a run; with the marker rule
(a line of the model's own text) and the one-line summary of a tool call.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, TypeAlias

from sandbox_runner.bounded import load_json
from sandbox_runner.console.units import usd

MARKER = "FORKHESTRA_COMPLETE"
"""The line an agent prints, alone, when its step's whole job is done."""
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


@dataclass(frozen=True)
class ToolCall:
    """The agent called a tool; `summary` is one abbreviated line such as `Bash: make test`."""

    name: str
    summary: str
    input: Any = field(default=None, compare=False, repr=False)
    """The call's whole input, as the CLI gave it (shown by `fks logs --full`)."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned to the agent."""

    text: str
    is_error: bool = False


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
class Usage:
    """What one model request used, as the CLI reported it (`cost_usd` None: not known)."""

    input_tokens: int
    output_tokens: int
    cost_usd: float | None = None


@dataclass(frozen=True)
class Result:
    """The end of a run: how it ended, what it cost.

    `text` is the agent's final text, or the CLI's error messages when it has none. An API failure
    shows as subtype "success" with `is_error` and the HTTP status in `api_error_status`;
    `error_max_turns` is the subtype of a run that hit its turn limit, whatever the CLI.
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


Event: TypeAlias = ToolCall | ToolResult | AssistantText | Init | Usage | Result


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


def _relative(path: str, cwd: str | None) -> str:
    if cwd and PurePath(path).is_absolute():
        try:
            return str(PurePath(path).relative_to(cwd))
        except ValueError:
            return path
    return path


def _abbreviate(text: str) -> str:
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def object_of(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


_JSON_BLOCK = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)


def answer_in(text: str | None) -> dict[str, Any] | None:
    """The JSON object a model answered with in its last text: its last ```json block, else
    the whole text (a CLI asked for a schema's answer gives only it); None: no object."""
    if not text:
        return None
    blocks = _JSON_BLOCK.findall(text)
    try:
        found = load_json(blocks[-1] if blocks else text.strip(), max_bytes=LINE_BYTES)
    except ValueError:
        return None
    return object_of(found)


MAX_COST = 1e6
"""USD one run reports at most: a larger cost is no cost a CLI could report."""
_MAX_INT = 10**15


def int_of(value: Any) -> int | None:
    """A finite number within reason, as an int (None: anything else, NaN and Infinity too)."""
    number = float_of(value)
    return int(number) if number is not None and abs(number) <= _MAX_INT else None


def float_of(value: Any) -> float | None:
    """A finite number, as a float (None: anything else, an int too large for a float too)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > _MAX_INT:
        return None  # float() would overflow on a huge one
    return float(value) if math.isfinite(value) else None


def cost_of(value: Any) -> float | None:
    """A cost as reported: a finite, non-negative number of USD within reason (None: anything
    else, so NaN, a negative or an infinite cost neither shows nor passes a budget)."""
    cost = float_of(value)
    return cost if cost is not None and 0 <= cost <= MAX_COST else None
