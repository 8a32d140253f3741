"""A scripted fake of the Anthropic Messages API that drives the real `claude` CLI in tests.

Standard library only, so it runs anywhere: as a pytest fixture (`with FakeAnthropic(script) as
fake:` then `fake.url`) or as a process for containers and manual runs:
`python -m sandbox_runner.testing.fakeapi --host 0.0.0.0 --port 8765 --script script.json [--log requests.jsonl]`.

Script format (JSON, or the same shapes as Python values):

    {"conversations": [
        {"match": "planner", "turns": [
            [{"text": "Planning."}, {"tool": "Write", "input": {"file_path": "plan.md", "content": "x"}}],
            [{"text": "Planned.\\nFORKHESTRA_COMPLETE"}]
        ]},
        [[{"tool": "Bash", "input": {"command": "echo hi > f.txt", "description": "write"}}],
         {"error": 429, "retry_after": 0},
         [{"text": "done"}]]
    ]}

A conversation is one claude invocation (one CLI session, told by its session id header; without
one, a request with no earlier assistant turn starts the next conversation). Each request of the
conversation answers with its next turn, in order: retries after a scripted error, and the
requests of a subagent (Agent tool; same session), take the next turns too. A conversation is a
list of turns or `{"turns": [...], "match": "text", "name": "x"}`; a new session takes the first
unused conversation whose `match` (a substring of the system prompt or of the first user message,
or in Python a predicate on the `Request`) fits.

A turn is a list of blocks, `{"blocks": [...], "stop_reason": ..., "usage": {...}, "delay": s,
"drop": bool}` (drop: the connection dies mid-stream), an error `{"error": 429|529|500|<status>,
"retry_after": s, "message": "...", "times": n|"forever", "in_stream": bool}`, or (in Python) a
callable taking the `Request` and returning a turn. A `responder=` callable sees every main
request first; when it returns None the script answers.
A block is `{"text": "..."}` (or just the string) or `{"tool": "Bash", "input": {...}}` (any tool).

Side requests (token counting, `HEAD /` probes, title or summary prompts: see `is_side_request`)
get a generic answer and consume no turns. When the script runs out the fake answers
`fake API: script exhausted` and records the request in `exhausted`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EXHAUSTED_TEXT = "fake API: script exhausted"
SIDE_TEXT = "fake API side answer"
# In the claude CLI's main-agent system prompt (2.1.x), not in its side prompts.
MAIN_PROMPT_MARK = "You are an interactive agent"
DEFAULT_USAGE = {"input_tokens": 120, "output_tokens": 30}
SECRET_HEADERS = {"x-api-key", "authorization"}

_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_ERROR_ALIASES = {"rate_limit": 429, "overloaded": 529, "api_error": 500}

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


def isolated_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without the caller's own Anthropic/Claude settings and tokens, plus `extra`."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
    }
    return {**kept, **(extra or {})}


def is_side_request(request: Request) -> bool:
    """A /v1/messages request that is not the agent's conversation (a title or summary prompt).

    The CLI's main requests carry tools; with `--tools ""` they carry none but still have the
    main agent's system prompt. In print mode 2.1.197 sends no side requests; interactive mode
    sends a session-title request (no tools, thinking disabled, a JSON schema output format).
    """
    if isinstance(request.body, dict) and request.body.get("tools"):
        return False
    return MAIN_PROMPT_MARK not in request.system_text


class FakeAnthropic:
    """The fake server. `requests` records everything; `exhausted` the unscripted requests."""

    def __init__(
        self,
        script: Any = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        responder: Callable[[Request], Turn | None] | None = None,
        is_side: Callable[[Request], bool] = is_side_request,
        log_path: Path | None = None,
    ) -> None:
        self.conversations = load_script(script)
        self.responder = responder
        self.is_side = is_side
        self.requests: list[Request] = []
        self.exhausted: list[Request] = []
        self.script_errors: list[str] = []
        self._sessions: dict[str, int] = {}
        self._current: int | None = None
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._log = log_path.open("a") if log_path else None
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    def start(self) -> FakeAnthropic:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()
        if self._log:
            self._log.close()
            self._log = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self, config_dir: Path | str, *, base_url: str | None = None) -> dict[str, str]:
        """Variables that point the claude CLI at this fake: `isolated_environ(fake.env(dir))`.

        `base_url` overrides `url`, e.g. for a container that reaches the host by another address.
        """
        return {
            "ANTHROPIC_BASE_URL": base_url or self.url,
            "ANTHROPIC_API_KEY": "test-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CONFIG_DIR": str(config_dir),
            # Needed for --dangerously-skip-permissions as root; harmless otherwise.
            "IS_SANDBOX": "1",
        }

    # -- script -----------------------------------------------------------------------------
    def add_conversation(
        self, turns: Sequence[Turn], *, match: Matcher = None, name: str | None = None
    ) -> Conversation:
        conversation = Conversation(turns=list(turns), match=match, name=name)
        with self._lock:
            self.conversations.append(conversation)
        return conversation

    def main_requests(self, conversation: int | None = None) -> list[Request]:
        """Requests of the main conversations (optionally of one, by index), in order."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.kind == "main" and (conversation is None or r.conversation == conversation)
            ]

    def side_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.kind != "main"]

    @property
    def conversations_started(self) -> int:
        with self._lock:
            return sum(1 for c in self.conversations if c.started)

    # -- answering --------------------------------------------------------------------------
    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _log_answered(self, request: Request) -> None:
        with self._lock:
            if self._log:
                self._log.write(json.dumps(request.to_json()) + "\n")
                self._log.flush()

    def _next_turn(self, request: Request) -> Turn | None:
        """Pick the turn that answers a main request; None when the script is exhausted."""
        if self.responder is not None:
            turn = self.responder(request)
            if turn is not None:
                return turn
        with self._lock:
            index = self._conversation_for(request)
            if index is None:
                return None
            conversation = self.conversations[index]
            request.conversation = index
            if conversation.position >= len(conversation.turns):
                return None
            request.turn = conversation.position
            turn = conversation.turns[conversation.position]
            conversation.repeats += 1
            times = turn.get("times", 1) if isinstance(turn, Mapping) and "error" in turn else 1
            if times != "forever" and conversation.repeats >= int(times):
                conversation.position += 1
                conversation.repeats = 0
        return turn(request) if callable(turn) else turn

    def _conversation_for(self, request: Request) -> int | None:
        session = request.session_id
        if session is not None and session in self._sessions:
            return self._sessions[session]
        if session is None and request.assistant_turns and self._current is not None:
            return self._current
        for index, conversation in enumerate(self.conversations):
            if not conversation.started and conversation.matches(request):
                conversation.started = True
                self._current = index
                if session is not None:
                    self._sessions[session] = index
                return index
        return None

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_fake{next(self._ids):04d}"


def side_answer(body: Any) -> str:
    """Text for a side request; JSON that fits when it asks for a JSON schema (session titles)."""
    config = body.get("output_config") if isinstance(body, dict) else None
    output_format = config.get("format") if isinstance(config, dict) else None
    if isinstance(output_format, dict) and isinstance(output_format.get("schema"), dict):
        return json.dumps(_example(output_format["schema"]))
    return SIDE_TEXT


def _example(schema: Mapping[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _example(sub) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return SIDE_TEXT


def _classify(request: Request, is_side: Callable[[Request], bool]) -> str:
    route = request.path.split("?", 1)[0].rstrip("/")
    if route.endswith("/count_tokens"):
        return "count_tokens"
    if not route.endswith("/v1/messages"):
        return "unknown"
    return "side" if is_side(request) else "main"


def _normalize(turn: Turn) -> dict[str, Any]:
    if isinstance(turn, Mapping):
        return dict(turn)
    if isinstance(turn, str):
        return {"blocks": [{"text": turn}]}
    return {"blocks": list(turn)}


def _content_blocks(
    fake: FakeAnthropic, blocks: Sequence[str | Mapping[str, Any]]
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, str):
            content.append({"type": "text", "text": block})
        elif "tool" in block:
            content.append(
                {
                    "type": "tool_use",
                    "id": block.get("id") or fake._new_id("toolu"),
                    "name": block["tool"],
                    "input": dict(block.get("input") or {}),
                }
            )
        elif "text" in block:
            content.append({"type": "text", "text": str(block["text"])})
        else:
            raise ValueError(f"fake API: block needs 'text' or 'tool': {block!r}")
    return content


def _chunks(text: str, size: int = 40) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]
    if not text:
        yield ""


def _make_handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        # -- plumbing -------------------------------------------------------------------------
        def _read(self) -> tuple[Request, Any]:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS}
            request = Request(self.command, self.path, headers, body)
            request.api_key = self.headers.get("x-api-key")
            return request, body

        def _send(
            self,
            status: int,
            payload: bytes,
            content_type: str,
            extra: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(payload)))
            self.send_header("request-id", fake._new_id("req"))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

        def _send_json(self, status: int, obj: Any, extra: Mapping[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json", extra)

        # -- verbs ------------------------------------------------------------------------------
        def do_HEAD(self) -> None:
            request, _ = self._read()
            request.kind, request.answer = "probe", "200"
            fake._record(request)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
            fake._log_answered(request)

        def do_GET(self) -> None:
            request, _ = self._read()
            request.kind, request.answer = "probe", "200 {}"
            fake._record(request)
            self._send_json(200, {})
            fake._log_answered(request)

        def do_POST(self) -> None:
            request, body = self._read()
            request.kind = _classify(request, fake.is_side)
            fake._record(request)
            try:
                self._post(request, body)
            finally:
                fake._log_answered(request)

        def _post(self, request: Request, body: Any) -> None:
            if request.kind == "unknown":
                request.answer = "404"
                self._send_error(404, "fake API: unknown path " + self.path)
            elif request.kind == "count_tokens":
                tokens = max(1, len(json.dumps(body)) // 4)
                request.answer = f"count_tokens {tokens}"
                self._send_json(200, {"input_tokens": tokens})
            elif request.kind == "side":
                text = side_answer(body)
                request.answer = "side: " + text
                self._answer(body, {"blocks": [{"text": text}]})
            else:
                turn = fake._next_turn(request)
                if turn is None:
                    with fake._lock:
                        fake.exhausted.append(request)
                    request.answer = "exhausted"
                    turn = {"blocks": [{"text": EXHAUSTED_TEXT}]}
                try:
                    self._answer(body, _normalize(turn), request)
                except (KeyError, TypeError, ValueError) as error:
                    # A broken script: say so in a way the CLI does not retry (400).
                    request.answer = f"bad script: {error!r}"
                    with fake._lock:
                        fake.script_errors.append(request.answer)
                    self._send_error(400, f"fake API: bad script: {error!r}")

        # -- answers ----------------------------------------------------------------------------
        def _send_error(
            self, status: int, message: str, extra: Mapping[str, str] | None = None
        ) -> None:
            kind = _ERRORS.get(status, "api_error")
            self._send_json(
                status, {"type": "error", "error": {"type": kind, "message": message}}, extra
            )

        def _answer(self, body: Any, turn: dict[str, Any], request: Request | None = None) -> None:
            if turn.get("delay"):
                time.sleep(float(turn["delay"]))
            stream = isinstance(body, dict) and bool(body.get("stream"))
            if "error" in turn:
                status = turn["error"]
                status = (
                    _ERROR_ALIASES.get(status, status) if isinstance(status, str) else int(status)
                )
                message = (
                    turn.get("message") or f"fake API: scripted {_ERRORS.get(status, 'error')}"
                )
                if request is not None and request.answer != "exhausted":
                    request.answer = f"error {status}"
                if turn.get("in_stream") and stream:
                    error = {
                        "type": "error",
                        "error": {"type": _ERRORS.get(status, "api_error"), "message": message},
                    }
                    self._send(200, _sse([("error", error)]), "text/event-stream")
                    return
                extra = {str(k): str(v) for k, v in (turn.get("headers") or {}).items()}
                if "retry_after" in turn:
                    extra["retry-after"] = str(turn["retry_after"])
                self._send_error(status, message, extra)
                return
            content = _content_blocks(fake, turn.get("blocks") or [])
            has_tool = any(b["type"] == "tool_use" for b in content)
            stop_reason = turn.get("stop_reason") or ("tool_use" if has_tool else "end_turn")
            usage = {**DEFAULT_USAGE, **(turn.get("usage") or {})}
            model = body.get("model", "claude-fake") if isinstance(body, dict) else "claude-fake"
            message_id = fake._new_id("msg")
            if request is not None and not request.answer:
                request.answer = stop_reason + ": " + json.dumps(content)[:200]
            if not stream:
                self._send_json(
                    200,
                    {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": content,
                        "stop_reason": stop_reason,
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": usage["input_tokens"],
                            "output_tokens": usage["output_tokens"],
                            "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0,
                        },
                    },
                )
                return
            events = list(_stream_events(message_id, model, content, stop_reason, usage))
            if turn.get("drop"):
                # A connection that dies mid-answer: headers and the first events, then EOF.
                self.close_connection = True
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(_sse(events[:2]))
                self.wfile.flush()
                return
            self._send(200, _sse(events), "text/event-stream", {"cache-control": "no-cache"})

    return Handler


def _stream_events(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: Mapping[str, int],
) -> Iterator[tuple[str, dict[str, Any]]]:
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage["input_tokens"],
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1,
                },
            },
        },
    )
    for index, block in enumerate(content):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            for piece in _chunks(block["text"]):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
        else:
            start = {**block, "input": {}}
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
            for piece in _chunks(json.dumps(block["input"])):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _sse(events: Iterator[tuple[str, dict[str, Any]]] | list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 for containers)")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port, printed)")
    parser.add_argument("--script", type=Path, help="JSON script of conversations")
    parser.add_argument("--log", type=Path, help="append every request as a JSON line here")
    args = parser.parse_args(argv)
    fake = FakeAnthropic(args.script, host=args.host, port=args.port, log_path=args.log)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"fake API listening on http://{args.host}:{fake.port}", flush=True)
    try:
        fake.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        fake._server.server_close()
        if fake.exhausted:
            print(
                f"fake API: script exhausted ({len(fake.exhausted)} unscripted requests)",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
