"""A Claude transcript (stream-json, as `fks logs` finds it in an iteration's log) as text a
person reads: what the agent said, the tools it called, their results cut short, and the end
with its cost and turns. Everything shown is neutralised; lines that are not stream-json (the
CLI's stderr) are shown as they are, neutralised too. What the agent wrote (its text, stderr)
carries the prefix of agent lines in plain output, so it never passes for the transcript's own
lines (the session, tool calls `→`, results `←`, the closing `result:`)."""

from __future__ import annotations

import json
from typing import Any

from sandbox_runner.steps.streamjson import AssistantText, Result, StreamJsonParser, ToolCall
from sandbox_runner.ui.ansi import strip_escapes
from sandbox_runner.ui.lines import clip, shown_line
from sandbox_runner.ui.output import AGENT_PREFIX
from sandbox_runner.ui.units import byte_count

RESULT_LINES = 3
"""Lines shown of a tool's result."""
RESULT_WIDTH = 200
"""Characters shown of each of them."""


def is_transcript(first_line: bytes) -> bool:
    """True when a log's first line is the init event of a Claude session."""
    obj = _json(first_line)
    return obj is not None and obj.get("type") == "system" and obj.get("subtype") == "init"


class TranscriptRenderer:
    """Feed a log's lines in order; each gives the lines to show for it."""

    def __init__(self) -> None:
        self._parser = StreamJsonParser()

    def lines(self, raw: bytes, cut: int) -> list[str]:
        obj = None if cut else _json(raw)
        if obj is None:
            if cut and raw.startswith(b"{"):
                return [_cut_event(cut)]
            return [AGENT_PREFIX + shown_line(raw, cut)]
        kind = obj.get("type")
        if kind == "user":
            return _tool_results(obj)
        if kind == "system" and obj.get("subtype") == "init":
            self._parser.feed_line(raw.decode("utf-8", "replace"))
            model = obj.get("model")
            return [_clean(clip(f"session {obj.get('session_id')}, model {model}", RESULT_WIDTH))]
        shown: list[str] = []
        for event in self._parser.feed_line(raw.decode("utf-8", "replace")):
            if isinstance(event, AssistantText):
                text = event.text.splitlines() or [""]
                shown.extend(AGENT_PREFIX + _clean(line) for line in text)
            elif isinstance(event, ToolCall):
                shown.append(f"→ {_clean(event.summary)}")
            elif isinstance(event, Result):
                shown.extend(_result(event))
        return shown


def _result(result: Result) -> list[str]:
    line = result.summary_line()
    if result.input_tokens is not None or result.output_tokens is not None:
        line += f", {result.input_tokens or 0} in / {result.output_tokens or 0} out tokens"
    lines = [_clean(clip(line, 2 * RESULT_WIDTH))]
    if result.is_error and result.text:
        errors = result.text.splitlines()[:RESULT_LINES]
        lines.extend(f"  {_clean(clip(text, RESULT_WIDTH))}" for text in errors)
    return lines


def _tool_results(obj: dict[str, Any]) -> list[str]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    shown: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            error = " (error)" if block.get("is_error") else ""
            lines = _result_text(block.get("content")).splitlines() or ["(no output)"]
            shown.append(f"  ← {_clean(clip(lines[0], RESULT_WIDTH))}{error}")
            shown.extend(
                f"    {_clean(clip(line, RESULT_WIDTH))}" for line in lines[1:RESULT_LINES]
            )
            if len(lines) > RESULT_LINES:
                shown.append(f"    … ({len(lines) - RESULT_LINES} more lines)")
    return shown


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (b.get("text") for b in content if isinstance(b, dict))
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _cut_event(cut: int) -> str:
    return f"(an event too long to show here, {byte_count(cut)} cut; `fks logs --raw` has it)"


def _clean(text: str) -> str:
    return strip_escapes(text, keep="\t")


def _json(raw: bytes) -> dict[str, Any] | None:
    if not raw.startswith(b"{"):
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
