"""What the fake Messages API receives and what its script answers: the recorded `Request`,
the scripted `Conversation`s of one claude invocation each, and which requests are side ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXHAUSTED_TEXT = "fake API: script exhausted"
SIDE_TEXT = "fake API side answer"
# In the claude CLI's main-agent system prompt (2.1.x), not in its side prompts.
MAIN_PROMPT_MARK = "You are an interactive agent"

Turn = Any  # list of blocks | dict | Callable[[Request], Turn]
Matcher = str | Callable[["Request"], bool] | None


@dataclass
class Request:
    """One HTTP request the fake received, with what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    kind: str = "main"  # main | side | count_tokens | probe | unknown
    conversation: int | None = None
    turn: int | None = None
    answer: str = ""
    time: float = field(default_factory=time.time)
    api_key: str | None = field(default=None, repr=False)
    """The x-api-key the request carried (kept out of every dump: it is a secret)."""

    @property
    def session_id(self) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == "x-claude-code-session-id":
                return value
        meta = self.body.get("metadata") if isinstance(self.body, dict) else None
        user_id = meta.get("user_id") if isinstance(meta, dict) else None
        if isinstance(user_id, str) and user_id.startswith("{"):
            try:
                session = json.loads(user_id).get("session_id")
            except (ValueError, AttributeError):
                return None
            return session if isinstance(session, str) else None
        return None

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages") if isinstance(self.body, dict) else None
        return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []

    @property
    def system_text(self) -> str:
        """The system prompt: the `system` field plus any `role: system` messages."""
        parts = [_text_of(self.body.get("system"))] if isinstance(self.body, dict) else []
        parts += [_text_of(m.get("content")) for m in self.messages if m.get("role") == "system"]
        return "\n".join(p for p in parts if p)

    def user_texts(self) -> list[str]:
        """Text of each user message (tool results excluded), in order."""
        return [_text_of(m.get("content")) for m in self.messages if m.get("role") == "user"]

    @property
    def first_user_text(self) -> str:
        texts = self.user_texts()
        return texts[0] if texts else ""

    @property
    def prompt(self) -> str:
        """The user's prompt: the first user message without the CLI's <system-reminder> parts."""
        for message in self.messages:
            if message.get("role") != "user":
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else [content]
            texts = (_text_of([block]) for block in blocks)
            return "\n".join(t for t in texts if t and not t.startswith("<system-reminder>"))
        return ""

    @property
    def assistant_turns(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """Every tool_result block: {"tool_use_id", "content" (text), "is_error"}."""
        found = []
        for message in self.messages:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(
                        {
                            "tool_use_id": block.get("tool_use_id"),
                            "content": _text_of(block.get("content")),
                            "is_error": bool(block.get("is_error")),
                        }
                    )
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "method": self.method,
            "path": self.path,
            "kind": self.kind,
            "conversation": self.conversation,
            "turn": self.turn,
            "answer": self.answer,
            "headers": self.headers,
            "body": self.body,
        }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "\n".join(parts)
    return ""


@dataclass
class Conversation:
    """The scripted assistant turns of one claude invocation."""

    turns: list[Turn]
    match: Matcher = None
    name: str | None = None
    position: int = 0  # next turn to answer
    repeats: int = 0  # answers already given by the current (error) turn
    started: bool = False

    def matches(self, request: Request) -> bool:
        if self.match is None:
            return True
        if callable(self.match):
            return bool(self.match(request))
        return self.match in request.system_text or self.match in request.first_user_text


def load_script(script: Any) -> list[Conversation]:
    """Turn a script (path, JSON text, dict or list) into conversations."""
    if isinstance(script, Path):
        script = json.loads(script.read_text())
    elif isinstance(script, str):
        script = json.loads(script)
    if isinstance(script, Mapping):
        script = script.get("conversations", [])
    conversations = []
    for item in script or []:
        if isinstance(item, Conversation):
            conversations.append(item)
        elif isinstance(item, Mapping):
            conversations.append(
                Conversation(
                    turns=list(item["turns"]), match=item.get("match"), name=item.get("name")
                )
            )
        else:
            conversations.append(Conversation(turns=list(item)))
    return conversations


def is_side_request(request: Request) -> bool:
    """A /v1/messages request that is not the agent's conversation (a title or summary prompt).

    The CLI's main requests carry tools; with `--tools ""` they carry none but still have the
    main agent's system prompt. In print mode 2.1.197 sends no side requests; interactive mode
    sends a session-title request (no tools, thinking disabled, a JSON schema output format).
    """
    if isinstance(request.body, dict) and request.body.get("tools"):
        return False
    return MAIN_PROMPT_MARK not in request.system_text
