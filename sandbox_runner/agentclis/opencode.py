"""OpenCode: `opencode run --format json`, with its Anthropic provider by default (the model
`anthropic/MODEL`; `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` as its users set them), its
model list fetch, auto-update and sharing off, and the system prompt as an instructions file
of fks's own. Its step limit is only a prompt: fks counts its steps and stops it.
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
    cost_of,
    int_of,
    text_of,
    tool_summary,
)
from sandbox_runner.agentclis.pricing import charged, count
from sandbox_runner.agentclis.stream import JsonLines

DEFAULT_PROVIDER = "anthropic"
_TOOLS = {"bash": "Bash", "write": "Write", "edit": "Edit", "read": "Read"}
_PATH_KEYS = ("filePath", "file_path", "path")
_INSTRUCTIONS = "instructions.md"


class OpenCode:
    name = "opencode"
    title = "OpenCode"
    program = "opencode"
    install = "npm install -g opencode-ai"
    key_vars: tuple[str, ...] = ("ANTHROPIC_API_KEY",)
    base_url_var = "ANTHROPIC_BASE_URL"
    api = "anthropic"
    fks_counts_turns = True

    def launch(self, call: Invocation) -> Launch:
        instructions = call.home / _INSTRUCTIONS
        provider, _, model = (call.model or "").rpartition("/")
        provider = provider or DEFAULT_PROVIDER
        options: dict[str, Any] = {}
        base = call.environ.get(self.base_url_var)
        if provider == DEFAULT_PROVIDER and base:
            options["baseURL"] = base.rstrip("/") + "/v1"
        entry: dict[str, Any] = {"options": options}
        if model:
            entry["models"] = {model: {}}
        config = {
            "provider": {provider: entry},
            "instructions": [str(instructions)],
            "autoupdate": False,
            "share": "disabled",
            # Its own undo history, a git copy of the whole tree at every step: fks's commits
            # are the history, and the copy cost more than the rest of a short iteration.
            "snapshot": False,
        }
        env = {
            "OPENCODE_CONFIG_CONTENT": json.dumps(config),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "PWD": str(call.cwd),
        }
        argv = [call.program, "run", "--format", "json", "--title", "fks"]
        if model:
            argv += ["--model", f"{provider}/{model}"]
        files = {_INSTRUCTIONS: call.system_prompt}
        return Launch([*argv, *call.args, "--", call.prompt], env, files)

    def parser(self, model: str | None = None) -> OpenCodeParser:
        return OpenCodeParser(model)

    def opens(self, event: Mapping[str, Any]) -> bool:
        return event.get("type") == "step_start" and "sessionID" in event

    def structured(self, schema: str, home: Path) -> Structured | None:
        return None


class OpenCodeParser(JsonLines):
    """`step_start`, `text`, `tool_use` (call and result at once), `step_finish`, `error`."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.model = model

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        kind = obj.get("type")
        part = obj.get("part")
        part = part if isinstance(part, dict) else {}
        if kind == "step_start":
            self.turns += 1
            if self.session_id is None:
                self.session_id = text_of(obj.get("sessionID"))
                return [Init(session_id=self.session_id, model=self.model)]
            return []
        if kind == "text" and isinstance(part.get("text"), str):
            self.said(part["text"])
            return [AssistantText(part["text"])]
        if kind == "tool_use":
            return _tool(part)
        if kind == "step_finish":
            return self._finish(part)
        if kind == "error":
            text, status = _error(obj.get("error"))
            return [self.ended("error", error=text, status=status)]
        return []

    def _finish(self, part: dict[str, Any]) -> list[Event]:
        tokens = part.get("tokens")
        tokens = tokens if isinstance(tokens, dict) else {}
        cache = tokens.get("cache")
        cached = count(cache.get("read")) if isinstance(cache, dict) else 0
        tokens_in = count(tokens.get("input")) + cached
        tokens_out = count(tokens.get("output"))
        cost = cost_of(part.get("cost")) or charged(self.model or "", tokens_in, tokens_out, cached)
        usage = Usage(tokens_in, tokens_out, cost)
        self.used(usage)
        if part.get("reason") == "tool-calls":
            return [usage]
        return [usage, self.ended("success")]


def _tool(part: dict[str, Any]) -> list[Event]:
    name = text_of(part.get("tool")) or "?"
    state = part.get("state")
    state = state if isinstance(state, dict) else {}
    raw = state.get("input")
    tool_input = raw if isinstance(raw, dict) else {}
    shown = _TOOLS.get(name, name)
    path = next((tool_input[k] for k in _PATH_KEYS if isinstance(tool_input.get(k), str)), None)
    if path is not None:
        tool_input = {**tool_input, "file_path": path}
    events: list[Event] = [ToolCall(shown, tool_summary(shown, tool_input), input=raw)]
    status = state.get("status")
    if status in ("completed", "error"):
        text = text_of(state.get("output")) or text_of(state.get("error")) or ""
        events.append(ToolResult(text, is_error=status == "error"))
    return events


def _error(error: Any) -> tuple[str, int | None]:
    """An error event's message and the API's status, when it names one."""
    if not isinstance(error, dict):
        return text_of(error) or "the CLI reported an error", None
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    text = text_of(data.get("message")) or text_of(error.get("name")) or "the CLI reported an error"
    return text, int_of(data.get("statusCode"))
