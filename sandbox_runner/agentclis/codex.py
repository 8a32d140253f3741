"""OpenAI's Codex CLI: `codex exec --json`, pointed at the Responses API by a provider of
fks's own on the command line (`OPENAI_BASE_URL`, the key from `OPENAI_API_KEY`), with its
retries, analytics and plugins off. It has no turn limit: fks counts each tool call as a turn.
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
    int_of,
    text_of,
    tool_summary,
)
from sandbox_runner.agentclis.pricing import charged, count
from sandbox_runner.agentclis.stream import JsonLines

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_PROVIDER = "fks-openai"
_SCHEMA = "answer-schema.json"
_TOOL_ITEMS = {
    "command_execution": "Bash",
    "file_change": "Edit",
    "mcp_tool_call": "MCP",
    "web_search": "WebSearch",
}


class Codex:
    name = "codex"
    title = "Codex"
    program = "codex"
    install = "npm install -g @openai/codex"
    key_vars: tuple[str, ...] = ("OPENAI_API_KEY",)
    base_url_var = "OPENAI_BASE_URL"
    api = "openai"
    fks_counts_turns = True

    def launch(self, call: Invocation) -> Launch:
        base = call.environ.get(self.base_url_var) or DEFAULT_BASE_URL
        provider = {
            "name": "OpenAI",
            "base_url": base,
            "wire_api": "responses",
            "env_key": "OPENAI_API_KEY",
            "stream_max_retries": 0,
            "request_max_retries": 0,
        }
        settings = [
            f"model_provider={json.dumps(_PROVIDER)}",
            f"model_providers.{_PROVIDER}={_toml_table(provider)}",
            "analytics.enabled=false",
            "features.plugins=false",
            f"developer_instructions={json.dumps(call.system_prompt)}",
        ]
        argv = [call.program, "exec", "--json", "--dangerously-bypass-approvals-and-sandbox"]
        argv += ["--skip-git-repo-check", "--cd", str(call.cwd)]
        for setting in settings:
            argv += ["-c", setting]
        if call.model:
            argv += ["-m", call.model]
        # The prompt last, after `--`: an agent's args must not take it as an option's value.
        return Launch([*argv, *call.args, "--", call.prompt])

    def parser(self, model: str | None = None) -> CodexParser:
        return CodexParser(model)

    def opens(self, event: Mapping[str, Any]) -> bool:
        return event.get("type") == "thread.started"

    def structured(self, schema: str, home: Path) -> Structured | None:
        return Structured(["--output-schema", str(home / _SCHEMA)], {_SCHEMA: schema})


def _toml_table(values: Mapping[str, object]) -> str:
    """An inline TOML table (JSON strings are TOML basic strings)."""
    return "{" + ",".join(f"{key}={json.dumps(value)}" for key, value in values.items()) + "}"


class CodexParser(JsonLines):
    """`thread.started`, `turn.*`, `item.*` (agent messages, commands, file changes), `error`."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.model = model

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        kind = obj.get("type")
        if kind == "thread.started":
            self.session_id = text_of(obj.get("thread_id"))
            return [Init(session_id=self.session_id, model=self.model)]
        if kind in ("item.started", "item.completed") and isinstance(obj.get("item"), dict):
            return self._item(obj["item"], started=kind == "item.started")
        if kind == "turn.completed":
            usage = obj.get("usage")
            return [*self._usage(usage if isinstance(usage, dict) else {}), self.ended("success")]
        if kind == "error" and "waiting for network" in str(obj.get("message")):
            # Codex retries a connection that fails without end, whatever its retry settings.
            self.unreachable = True
            return [self.ended("error", error=text_of(obj.get("message")))]
        if kind == "turn.failed":
            error = obj.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            return [self.ended("error", error=text_of(message) or "turn failed")]
        return []

    def _item(self, item: dict[str, Any], *, started: bool) -> list[Event]:
        kind = item.get("type")
        if kind == "agent_message" and not started and isinstance(item.get("text"), str):
            self.said(item["text"])
            return [AssistantText(item["text"])]
        if kind not in _TOOL_ITEMS:
            return []
        if started:
            self.turns += 1
            return [_call(_TOOL_ITEMS[str(kind)], item)]
        if kind == "command_execution":
            code = int_of(item.get("exit_code"))
            output = text_of(item.get("aggregated_output")) or ""
            return [ToolResult(output, is_error=code not in (0, None))]
        return [ToolResult(text_of(item.get("status")) or "done")]

    def _usage(self, usage: dict[str, Any]) -> list[Event]:
        tokens_in = count(usage.get("input_tokens"))
        tokens_out = count(usage.get("output_tokens"))
        cached = count(usage.get("cached_input_tokens"))
        cost = charged(self.model or "", tokens_in, tokens_out, cached)
        found = Usage(tokens_in, tokens_out, cost)
        self.used(found)
        return [found]


def _call(name: str, item: dict[str, Any]) -> ToolCall:
    if name == "Bash":
        tool_input: dict[str, Any] = {"command": text_of(item.get("command")) or ""}
    elif name == "Edit":
        changes = item.get("changes")
        paths = (
            [c.get("path") for c in changes if isinstance(c, dict)]
            if isinstance(changes, list)
            else []
        )
        tool_input = {"file_path": ", ".join(str(p) for p in paths)}
    else:
        tool_input = {k: v for k, v in item.items() if k not in ("id", "type", "status")}
    return ToolCall(name=name, summary=tool_summary(name, tool_input), input=tool_input)
