"""An agent CLI's transcript (its stream, as `fks logs` finds it in an iteration's log: Claude's
stream-json, or another CLI's, read by its adapter) as text a person reads: what the agent said, the tools it called, their results cut short, and the end
with its cost and turns. Everything shown is neutralised; lines that are not stream-json (the
CLI's stderr) are shown as they are, neutralised too. What the agent wrote (its text, stderr)
carries the prefix of agent lines in plain output, so it never passes for the transcript's own
lines (the session, tool calls `→`, results `←`, the closing `result:`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sandbox_runner.agentclis.api import AgentCli, StreamParser
from sandbox_runner.agentclis.events import (
    LINE_BYTES,
    AssistantText,
    Event,
    Init,
    Result,
    ToolCall,
    ToolResult,
)
from sandbox_runner.agentclis.registry import CLAUDE, opening
from sandbox_runner.bounded import LimitExceeded, load_json
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.lines import clip, shown_line
from sandbox_runner.console.output import AGENT_PREFIX
from sandbox_runner.console.units import byte_count

RESULT_LINES = 3
"""Lines shown of a tool's result."""
RESULT_WIDTH = 200
"""Characters shown of each of them."""


def is_transcript(first_line: bytes) -> bool:
    """True when a log's first line is the first event of an agent CLI's session."""
    obj, _ = _json(first_line)
    return obj is not None and opening(obj) is not None


FULL_CHARS = 20_000
"""Characters of one tool call or result shown whole (`fks logs --full`, the web view)."""


@dataclass(frozen=True)
class Shown:
    """One thing a transcript shows: its lines, and the whole of a tool call or result."""

    head: str
    more: tuple[str, ...] = ()
    """The lines after `head` shown by default (a result's next lines)."""
    whole: tuple[str, ...] = ()
    """The whole call or result (its first FULL_CHARS characters), a line each, neutralised;
    empty when `head` and `more` show all of it."""
    whole_head: str | None = None
    """What `head` becomes above `whole` (None: the same)."""


class TranscriptRenderer:
    """Feed a log's lines in order; each gives the lines to show for it (`full`: tool calls
    and results whole). The CLI is known by the stream's first event (Claude's when the first
    event is none's)."""

    def __init__(self, *, full: bool = False) -> None:
        self._parser: StreamParser | None = None
        self._full = full
        self.cli: AgentCli | None = None
        """Whose stream it is, once its first event says (or Claude's, by default)."""

    def lines(self, raw: bytes, cut: int) -> list[str]:
        out: list[str] = []
        for item in self.shown(raw, cut):
            if self._full and item.whole:
                out.append(item.head if item.whole_head is None else item.whole_head)
                out.extend(f"    {line}" for line in item.whole)
            else:
                out += [item.head, *item.more]
        return out

    def shown(self, raw: bytes, cut: int) -> list[Shown]:
        obj, unread = (None, None) if cut else _json(raw)
        if obj is None:
            return [_not_an_event(raw, cut, unread)]
        if self._parser is None:
            self.cli = opening(obj) or CLAUDE
            self._parser = self.cli.parser()
        shown: list[Shown] = []
        for event in self._parser.feed_line(raw.decode("utf-8", "replace")):
            shown.extend(_event_shown(event))
        return shown


def _not_an_event(raw: bytes, cut: int, unread: LimitExceeded | None) -> Shown:
    """A line that is no stream-json event: one cut short, one not read, or the agent's own."""
    if cut and raw.startswith(b"{"):
        return Shown(_cut_event(cut))
    if unread is not None:
        return Shown(_unread_event(unread))
    return Shown(AGENT_PREFIX + shown_line(raw, cut))


def _event_shown(event: Event) -> list[Shown]:
    """An event the parser read."""
    if isinstance(event, AssistantText):
        return [Shown(AGENT_PREFIX + _clean(line)) for line in event.text.splitlines() or [""]]
    if isinstance(event, ToolCall):
        head = f"→ {_clean(event.summary)}"
        return [Shown(head, whole=_whole_call(head, event.input))]
    if isinstance(event, ToolResult):
        return [_tool_result(event)]
    if isinstance(event, Init):
        line = f"session {event.session_id}" + (f", model {event.model}" if event.model else "")
        return [Shown(_clean(clip(line, RESULT_WIDTH)))]
    if isinstance(event, Result):
        head, *more = _result(event)
        return [Shown(head, tuple(more))]
    return []


def _result(result: Result) -> list[str]:
    line = result.summary_line()
    if result.input_tokens is not None or result.output_tokens is not None:
        line += f", {result.input_tokens or 0} in / {result.output_tokens or 0} out tokens"
    lines = [_clean(clip(line, 2 * RESULT_WIDTH))]
    if result.is_error and result.text:
        errors = result.text.splitlines()[:RESULT_LINES]
        lines.extend(f"  {_clean(clip(text, RESULT_WIDTH))}" for text in errors)
    return lines


def _whole_call(head: str, tool_input: Any) -> tuple[str, ...]:
    """A call's whole input: a Bash command as it is, anything else as indented JSON; empty
    when `head` shows all of it."""
    if isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str):
        text = tool_input["command"]
    else:
        try:
            text = json.dumps(tool_input, indent=2, ensure_ascii=False, default=str)
        except (ValueError, RecursionError):
            return ()
    if not head.endswith("…") and " ".join(text.split()) in head:
        return ()
    return _bounded(text)


def _bounded(text: str) -> tuple[str, ...]:
    """`text`'s lines, neutralised, up to FULL_CHARS characters, saying what was left out."""
    lines: list[str] = []
    left = FULL_CHARS
    for line in text.splitlines() or [""]:
        if len(line) >= left:
            lines.append(_clean(line[:left]))
            lines.append(
                f"… ({len(text) - FULL_CHARS:,} more characters; `fks logs --raw` has them)"
            )
            break
        lines.append(_clean(line))
        left -= len(line) + 1
    return tuple(lines)


def _tool_result(result: ToolResult) -> Shown:
    error = " (error)" if result.is_error else ""
    lines = result.text.splitlines() or ["(no output)"]
    more = [f"    {_clean(clip(line, RESULT_WIDTH))}" for line in lines[1:RESULT_LINES]]
    if len(lines) > RESULT_LINES:
        more.append(f"    … ({len(lines) - RESULT_LINES} more lines)")
    whole = len(lines) > RESULT_LINES or any(len(line) > RESULT_WIDTH for line in lines)
    return Shown(
        f"  ← {_clean(clip(lines[0], RESULT_WIDTH))}{error}",
        tuple(more),
        whole=_bounded(result.text) if whole else (),
        whole_head=f"  ←{error}",
    )


def _cut_event(cut: int) -> str:
    return f"(an event too long to show here, {byte_count(cut)} cut; `fks logs --raw` has it)"


def _unread_event(why: LimitExceeded) -> str:
    return f"(an event {why}, not read; `fks logs --raw` has it)"


def _clean(text: str) -> str:
    return strip_escapes(text, keep="\t")


def _json(raw: bytes) -> tuple[dict[str, Any] | None, LimitExceeded | None]:
    """The event on a line, or None: when it is past a bound, which one."""
    if not raw.startswith(b"{"):
        return None, None
    try:
        obj = load_json(raw, max_bytes=LINE_BYTES)
    except LimitExceeded as exc:
        return None, exc
    except ValueError:
        return None, None
    return (obj if isinstance(obj, dict) else None), None
