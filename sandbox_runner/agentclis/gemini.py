"""Google's Gemini CLI: `gemini -p … --output-format stream-json --approval-mode=yolo`, with a
home of fks's own (`GEMINI_CLI_HOME`) whose settings choose the API key (`GEMINI_API_KEY`;
`GOOGLE_GEMINI_BASE_URL` as its users set it), turn usage statistics off and set the turn limit
(`model.maxSessionTurns`), and whose `GEMINI.md` holds the system prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox_runner.agentclis.api import Invocation, Launch, Structured
from sandbox_runner.agentclis.events import (
    AssistantText,
    Event,
    Init,
    ToolCall,
    ToolResult,
    Usage,
    text_of,
    tool_summary,
)
from sandbox_runner.agentclis.pricing import charged, count
from sandbox_runner.agentclis.stream import JsonLines

_TURN_LIMIT_ERROR = "FatalTurnLimitedError"
_TOOLS = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "replace": "Edit",
    "read_file": "Read",
}


class Gemini:
    name = "gemini"
    title = "Gemini CLI"
    program = "gemini"
    install = "npm install -g @google/gemini-cli (it needs Node 20 or later)"
    key_vars: tuple[str, ...] = ("GEMINI_API_KEY",)
    base_url_var = "GOOGLE_GEMINI_BASE_URL"
    api = "gemini"
    fks_counts_turns = False

    def launch(self, call: Invocation) -> Launch:
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "model": {"maxSessionTurns": call.max_turns},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        files = {
            ".gemini/settings.json": json.dumps(settings),
            ".gemini/GEMINI.md": call.system_prompt,
        }
        argv = [call.program, "-p", call.prompt, "--output-format", "stream-json"]
        argv += ["--approval-mode=yolo"]
        if call.model:
            argv += ["-m", call.model]
        env = {"GEMINI_CLI_HOME": str(call.home), "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        return Launch([*argv, *call.args], env, files)

    def parser(self, model: str | None = None) -> GeminiParser:
        return GeminiParser(model)

    def opens(self, event: Mapping[str, Any]) -> bool:
        return event.get("type") == "init" and "session_id" in event

    def structured(self, schema: str, home: Path) -> Structured | None:
        return None


class GeminiParser(JsonLines):
    """`init`, `message` (the model's text in pieces), `tool_use`, `tool_result`, `result`."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.model = model
        self._pieces: list[str] = []

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        kind = obj.get("type")
        if kind == "message" and obj.get("role") == "assistant":
            self._pieces.append(text_of(obj.get("content")) or "")
            return []
        events = self.close()
        if kind == "init":
            self.session_id = text_of(obj.get("session_id"))
            self.model = text_of(obj.get("model")) or self.model
            events.append(Init(session_id=self.session_id, model=self.model))
        elif kind == "tool_use":
            self.turns += 1
            events.append(_call(obj))
        elif kind == "tool_result":
            output = obj.get("output")
            error = obj.get("error")
            text = text_of(output) or (
                text_of(error.get("message")) if isinstance(error, dict) else None
            )
            events.append(ToolResult(text or "", is_error=obj.get("status") == "error"))
        elif kind == "result":
            events += self._result(obj)
        return events

    def close(self) -> list[Event]:
        """The text held so far, whole: the marker can arrive in two pieces."""
        if not self._pieces:
            return []
        text, self._pieces = "".join(self._pieces), []
        self.said(text)
        return [AssistantText(text)]

    def _result(self, obj: dict[str, Any]) -> list[Event]:
        stats = obj.get("stats")
        stats = stats if isinstance(stats, dict) else {}
        tokens_in = count(stats.get("input_tokens"))
        tokens_out = count(stats.get("output_tokens"))
        usage = Usage(tokens_in, tokens_out, charged(self.model or "", tokens_in, tokens_out))
        self.used(usage)
        if obj.get("status") == "success":
            return [usage, self.ended("success")]
        error = obj.get("error")
        error = error if isinstance(error, dict) else {}
        message = text_of(error.get("message")) or "the CLI reported an error"
        subtype = "error_max_turns" if error.get("type") == _TURN_LIMIT_ERROR else "error"
        return [usage, self.ended(subtype, error=message)]


def _call(obj: dict[str, Any]) -> ToolCall:
    name = text_of(obj.get("tool_name")) or "?"
    parameters = obj.get("parameters")
    tool_input = parameters if isinstance(parameters, dict) else {}
    shown = _TOOLS.get(name, name)
    if shown in ("Write", "Edit", "Read") and "file_path" not in tool_input:
        tool_input = {**tool_input, "file_path": tool_input.get("absolute_path", "")}
    return ToolCall(name=shown, summary=tool_summary(shown, tool_input), input=parameters)
