"""Scripted fakes of the model APIs other agent CLIs speak, to drive the real CLIs in tests:
the OpenAI Responses API (`POST …/responses`, server-sent events) for Codex, and Gemini's
`models/{m}:streamGenerateContent?alt=sse` and `:generateContent` for Gemini CLI. OpenCode's
Anthropic provider talks to the Messages API fake (`fakeapi`).

A script is a list of turns, one per main request, in order; a turn is a list of blocks,
`{"text": "..."}` or `{"shell": "command"}` (a call of the CLI's shell tool), or an error
`{"error": 401}`. `forever=` answers every request past the script (e.g. a shell call, for a
model that never stops); without it an exhausted script answers `EXHAUSTED_TEXT`. Side
requests (Gemini's `generateContent`: its loop and next-speaker checks; a Responses request
without tools) get a generic answer.

    with FakeModelApi("openai", [[{"shell": "git commit …"}], [{"text": "FORKHESTRA_COMPLETE"}]]) as api:
        env = api.env()
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Literal

Dialect = Literal["openai", "gemini"]
Block = dict[str, Any]
Turn = Sequence[Block] | Block
EXHAUSTED_TEXT = "fake API: script exhausted"
SIDE_TEXT = "fake API: side answer"
API_KEY = "sk-fake-" + "0penAiGem1niKey4Tests9x7Qw"
USAGE = {"input": 100, "output": 20}


class FakeModelApi:
    """The fake server; `requests` holds every request's path and body, in order."""

    def __init__(
        self,
        dialect: Dialect,
        script: Sequence[Turn] = (),
        *,
        forever: Turn | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """`host`: where it listens (0.0.0.0 for containers, which reach it as
        host.docker.internal)."""
        self.dialect = dialect
        self.turns = list(script)
        self.forever = forever
        self.requests: list[tuple[str, Any]] = []
        self.main_count = 0
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModelApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
        self._server.server_close()

    def env(self, key: str = API_KEY, *, host: str = "127.0.0.1") -> dict[str, str]:
        """The variables the CLI's users set to reach this API (key and base URL) by `host`
        (host.docker.internal from a container)."""
        url = f"http://{host}:{self.port}"
        if self.dialect == "openai":
            return {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": f"{url}/v1"}
        return {"GEMINI_API_KEY": key, "GOOGLE_GEMINI_BASE_URL": url}

    def next_turn(self, path: str, body: Any) -> Turn | None:
        """The turn answering a main request (None: a side request)."""
        with self._lock:
            self.requests.append((path, body))
            if self.dialect == "gemini" and ":streamGenerateContent" not in path:
                return None
            if self.dialect == "openai" and not (isinstance(body, dict) and body.get("tools")):
                return [{"text": SIDE_TEXT}]  # a side request (a title, a summary)
            index, self.main_count = self.main_count, self.main_count + 1
        if index < len(self.turns):
            return self.turns[index]
        return self.forever if self.forever is not None else [{"text": EXHAUSTED_TEXT}]


def openai_events(turn: Sequence[Block], number: int, tools: Sequence[str]) -> bytes:
    """A Responses API stream answering with `turn`'s blocks; a shell block calls the first of
    the request's `tools` that runs commands."""
    items: list[dict[str, Any]] = []
    for i, block in enumerate(turn):
        if "text" in block:
            content = [{"type": "output_text", "text": block["text"], "annotations": []}]
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": f"msg_{number}_{i}",
                    "content": content,
                }
            )
        else:
            name, arguments = _openai_shell(tools, block["shell"])
            call = {
                "type": "function_call",
                "id": f"fc_{number}_{i}",
                "call_id": f"call_{number}_{i}",
            }
            items.append({**call, "name": name, "arguments": arguments})
    response: dict[str, Any] = {
        "id": f"resp_{number}",
        "object": "response",
        "status": "in_progress",
    }
    events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": response})]
    for index, item in enumerate(items):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    usage = {
        "input_tokens": USAGE["input"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": USAGE["output"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": USAGE["input"] + USAGE["output"],
    }
    done = {**response, "status": "completed", "output": items, "usage": usage}
    events.append(("response.completed", {"response": done}))
    return b"".join(
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
        for name, data in events
    )


def _openai_shell(tools: Sequence[str], command: str) -> tuple[str, str]:
    for name in ("exec_command", "shell_command", "shell"):
        if name in tools:
            if name == "exec_command":
                return name, json.dumps({"cmd": command})
            if name == "shell_command":
                return name, json.dumps({"command": command})
            return name, json.dumps({"command": ["bash", "-lc", command]})
    raise AssertionError(f"no shell tool among {list(tools)}")


def gemini_chunks(turn: Sequence[Block]) -> bytes:
    """A streamGenerateContent SSE answer: each block a chunk of its own (text in two pieces,
    as the API splits it), usage on the last."""
    parts: list[dict[str, Any]] = []
    for block in turn:
        if "text" in block:
            text = block["text"]
            half = len(text) // 2
            parts += [{"text": text[:half]}, {"text": text[half:]}]
        else:
            parts.append(
                {"functionCall": {"name": "run_shell_command", "args": {"command": block["shell"]}}}
            )
    chunks = []
    for i, part in enumerate(parts):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-fake"}
        if i == len(parts) - 1:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": USAGE["input"],
                "candidatesTokenCount": USAGE["output"],
                "totalTokenCount": USAGE["input"] + USAGE["output"],
            }
        chunks.append(chunk)
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks)


def gemini_side() -> dict[str, Any]:
    """generateContent's answer: the next speaker is the user, no loop."""
    text = json.dumps(
        {"reasoning": "done", "next_speaker": "user", "unproductive_state_detected": False}
    )
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
    usage = {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}
    return {"candidates": [candidate], "usageMetadata": usage}


def _error_body(dialect: Dialect, status: int) -> dict[str, Any]:
    message = "Incorrect API key provided" if status == 401 else f"fake error {status}"
    if dialect == "openai":
        return {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return {"error": {"code": status, "message": message, "status": "UNAUTHENTICATED"}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: ClassVar[FakeModelApi]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, b"{}", "application/json")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        fake = self.fake
        turn = fake.next_turn(self.path, body)
        if turn is None:
            self._send(200, json.dumps(gemini_side()).encode(), "application/json")
            return
        if isinstance(turn, dict) and "error" in turn:
            status = int(turn["error"])
            self._send(
                status, json.dumps(_error_body(fake.dialect, status)).encode(), "application/json"
            )
            return
        blocks = [turn] if isinstance(turn, dict) else list(turn)
        if fake.dialect == "openai":
            tools = [
                t.get("name", "") for t in (body or {}).get("tools", []) if isinstance(t, dict)
            ]
            payload = openai_events(blocks, fake.main_count, tools)
        else:
            payload = gemini_chunks(blocks)
        self._send(200, payload, "text/event-stream")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
