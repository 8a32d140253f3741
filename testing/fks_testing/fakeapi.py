"""A scripted fake of the Anthropic Messages API that drives the real `claude` CLI in tests.

Standard library only, so it runs anywhere: as a pytest fixture (`with FakeAnthropic(script) as
fake:` then `fake.url`) or as a process for containers and manual runs:
`python -m fks_testing.fakeapi --host 0.0.0.0 --port 8765 --script script.json [--log requests.jsonl]`.

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
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from fks_testing.answers import (
    DEFAULT_USAGE,
    ERRORS,
    classify,
    content_blocks,
    error_body,
    error_status,
    message_body,
    normalize,
    side_answer,
    sse,
    stream_events,
)
from fks_testing.conversations import (
    EXHAUSTED_TEXT,
    SIDE_TEXT,
    Conversation,
    Matcher,
    Request,
    Turn,
    is_side_request,
    load_script,
)

__all__ = [
    "EXHAUSTED_TEXT",
    "SIDE_TEXT",
    "Conversation",
    "FakeAnthropic",
    "Request",
    "is_side_request",
    "isolated_environ",
    "load_script",
    "main",
]

SECRET_HEADERS = {"x-api-key", "authorization"}


def isolated_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without the caller's own Anthropic/Claude settings and tokens, plus `extra`."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
    }
    return {**kept, **(extra or {})}


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
        self._server = ThreadingHTTPServer(
            (host, port), type("Handler", (_Handler,), {"fake": self})
        )
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


class _Handler(BaseHTTPRequestHandler):
    """Answers one connection's requests for `fake` (set on a subclass per server)."""

    protocol_version = "HTTP/1.1"
    fake: ClassVar[FakeAnthropic]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -----------------------------------------------------------------------------
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
        self.send_header("request-id", self.fake._new_id("req"))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _send_json(self, status: int, obj: Any, extra: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", extra)

    # -- verbs --------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        request, _ = self._read()
        request.kind, request.answer = "probe", "200"
        self.fake._record(request)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
        self.fake._log_answered(request)

    def do_GET(self) -> None:
        request, _ = self._read()
        request.kind, request.answer = "probe", "200 {}"
        self.fake._record(request)
        self._send_json(200, {})
        self.fake._log_answered(request)

    def do_POST(self) -> None:
        request, body = self._read()
        request.kind = classify(request, self.fake.is_side)
        self.fake._record(request)
        try:
            self._post(request, body)
        finally:
            self.fake._log_answered(request)

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
            self._post_main(request, body)

    def _post_main(self, request: Request, body: Any) -> None:
        fake = self.fake
        turn = fake._next_turn(request)
        if turn is None:
            with fake._lock:
                fake.exhausted.append(request)
            request.answer = "exhausted"
            turn = {"blocks": [{"text": EXHAUSTED_TEXT}]}
        try:
            self._answer(body, normalize(turn), request)
        except (KeyError, TypeError, ValueError) as error:
            # A broken script: say so in a way the CLI does not retry (400).
            request.answer = f"bad script: {error!r}"
            with fake._lock:
                fake.script_errors.append(request.answer)
            self._send_error(400, f"fake API: bad script: {error!r}")

    # -- answers ------------------------------------------------------------------------------
    def _send_error(
        self, status: int, message: str, extra: Mapping[str, str] | None = None
    ) -> None:
        self._send_json(status, error_body(status, message), extra)

    def _answer(self, body: Any, turn: dict[str, Any], request: Request | None = None) -> None:
        if turn.get("delay"):
            time.sleep(float(turn["delay"]))
        stream = isinstance(body, dict) and bool(body.get("stream"))
        if "error" in turn:
            self._answer_error(turn, stream, request)
            return
        content = content_blocks(self.fake._new_id, turn.get("blocks") or [])
        has_tool = any(b["type"] == "tool_use" for b in content)
        stop_reason = turn.get("stop_reason") or ("tool_use" if has_tool else "end_turn")
        usage = {**DEFAULT_USAGE, **(turn.get("usage") or {})}
        model = body.get("model", "claude-fake") if isinstance(body, dict) else "claude-fake"
        message_id = self.fake._new_id("msg")
        if request is not None and not request.answer:
            request.answer = stop_reason + ": " + json.dumps(content)[:200]
        if not stream:
            self._send_json(200, message_body(message_id, model, content, stop_reason, usage))
            return
        events = list(stream_events(message_id, model, content, stop_reason, usage))
        if turn.get("drop"):
            # A connection that dies mid-answer: headers and the first events, then EOF.
            self.close_connection = True
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(sse(events[:2]))
            self.wfile.flush()
            return
        self._send(200, sse(events), "text/event-stream", {"cache-control": "no-cache"})

    def _answer_error(
        self, turn: dict[str, Any], stream: bool, request: Request | None = None
    ) -> None:
        status = error_status(turn)
        message = turn.get("message") or f"fake API: scripted {ERRORS.get(status, 'error')}"
        if request is not None and request.answer != "exhausted":
            request.answer = f"error {status}"
        if turn.get("in_stream") and stream:
            self._send(200, sse([("error", error_body(status, message))]), "text/event-stream")
            return
        extra = {str(k): str(v) for k, v in (turn.get("headers") or {}).items()}
        if "retry_after" in turn:
            extra["retry-after"] = str(turn["retry_after"])
        self._send_error(status, message, extra)


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
