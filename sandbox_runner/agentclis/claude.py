"""Claude Code: `claude -p … --output-format stream-json --verbose`, read into neutral events.

Completion is read only from what the main agent says (its text blocks and the final result), never
from tool inputs or tool output: an agent that `cat`s a prompt containing the marker is not done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sandbox_runner.agentclis.api import Invocation, Launch, Structured
from sandbox_runner.agentclis.events import (
    AssistantText,
    Event,
    Init,
    Result,
    ToolCall,
    ToolResult,
    cost_of,
    has_marker,
    int_of,
    object_of,
    text_of,
    tool_summary,
)
from sandbox_runner.agentclis.pricing import RunningCost
from sandbox_runner.agentclis.stream import events_of

SETTING_SOURCES = ("--setting-sources", "user")
"""Claude Code loads no project or local settings (`.claude/settings*.json`, `.mcp.json`,
CLAUDE.md, project agents): only the user's, and what fks passes on the command line."""
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")
"""The variables that authenticate Claude Code with the model API: a sandboxed Claude gets
them, and their values are masked wherever output is kept or shown."""
_SYNTHETIC_MODEL = "<synthetic>"


class Claude:
    """The Claude Code adapter: its turn limit is its own (`--max-turns`)."""

    name = "claude"
    title = "Claude"
    program = "claude"
    install = "npm install -g @anthropic-ai/claude-code"
    key_vars: tuple[str, ...] = CREDENTIAL_VARS
    base_url_var = "ANTHROPIC_BASE_URL"
    api = "anthropic"
    fks_counts_turns = False

    def launch(self, call: Invocation) -> Launch:
        # The prompt goes right after -p: the tool flags are variadic and would swallow it.
        argv = [call.program, "-p", call.prompt, "--output-format", "stream-json", "--verbose"]
        argv += ["--dangerously-skip-permissions", *SETTING_SOURCES]
        argv += ["--append-system-prompt", call.system_prompt, "--max-turns", str(call.max_turns)]
        if call.model:
            argv += ["--model", call.model]
        return Launch([*argv, *call.args])

    def parser(self, model: str | None = None) -> StreamJsonParser:
        return StreamJsonParser()

    def opens(self, event: Mapping[str, Any]) -> bool:
        return event.get("type") == "system" and event.get("subtype") == "init"

    def structured(self, schema: str, home: Path) -> Structured | None:
        return Structured(["--json-schema", schema])


class StreamJsonParser:
    """Feed stdout lines one at a time; read `marker_seen`, `result` and `session_id` as you go."""

    def __init__(self) -> None:
        self.marker_seen = False
        self.result: Result | None = None
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.turns = 0
        self.unreachable = False  # Claude ends with an error of its own
        self._cost = RunningCost()
        """What the assistant messages so far cost at least (before the result says)."""

    @property
    def running_cost(self) -> float | None:
        """What the iteration has spent so far, at least; None once the result is in."""
        return None if self.result is not None else self._cost.usd

    def close(self) -> list[Event]:
        return []

    def feed_line(self, line: str) -> list[Event]:
        """Events for one line; lines that are not stream-json or of unknown types give none, nor
        do lines too large or too deeply nested to read (they stay in the log as they are)."""
        return events_of(line, self._event)

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "init":
            self.session_id = text_of(obj.get("session_id")) or self.session_id
            self.cwd = text_of(obj.get("cwd"))
            return [
                Init(session_id=text_of(obj.get("session_id")), model=text_of(obj.get("model")))
            ]
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return _tool_results(obj)
        if kind == "result":
            return [self._result(obj)]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[Event]:
        message = obj.get("message")
        if not isinstance(message, dict):
            return []
        self._cost.message(message)
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
                summary = tool_summary(name, tool_input, self.cwd)
                events.append(ToolCall(name=name, summary=summary, input=block.get("input")))
        return events

    def _result(self, obj: dict[str, Any]) -> Result:
        usage = obj.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        text = text_of(obj.get("result"))
        errors = obj.get("errors")
        if text is None and isinstance(errors, list) and errors:
            # error_max_turns and friends carry no result text, only these messages.
            text = "; ".join(str(error) for error in errors)
        result = Result(
            subtype=_subtype(obj.get("subtype")),
            is_error=bool(obj.get("is_error")),
            text=text,
            num_turns=int_of(obj.get("num_turns")),
            duration_ms=int_of(obj.get("duration_ms")),
            cost_usd=cost_of(obj.get("total_cost_usd")),
            input_tokens=int_of(usage.get("input_tokens")),
            output_tokens=int_of(usage.get("output_tokens")),
            session_id=text_of(obj.get("session_id")),
            api_error_status=int_of(obj.get("api_error_status")),
            structured_output=object_of(obj.get("structured_output")),
        )
        if text is not None and not result.is_error and has_marker(text):
            self.marker_seen = True
        self.result = result
        self.session_id = result.session_id or self.session_id
        return result


def _tool_results(obj: dict[str, Any]) -> list[Event]:
    """The tool results a `user` event hands back to the model."""
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [
        ToolResult(text=_result_text(block.get("content")), is_error=bool(block.get("is_error")))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (b.get("text") for b in content if isinstance(b, dict))
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


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


_SUBTYPE = re.compile(r"[a-z][a-z0-9_]{0,39}")


def _subtype(value: Any) -> str:
    """The result's kind as Claude names them (`success`, `error_max_turns`…): the agent's
    stream says it, and fks prints it on its own result line, so any other text is `unknown`."""
    text = text_of(value)
    return text if text is not None and _SUBTYPE.fullmatch(text) else "unknown"
