"""A local HTTP sink for notifications: what Apprise's `json://HOST:PORT/PATH` and plain-HTTP
`ntfy://HOST:PORT/TOPIC` post to it is kept, one `Post` each, for a test to look at."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def text(self) -> str:
        """Everything a person would read of it: title and message (json://, ntfy)."""
        return f"{self.body.get('title', '')}\n{self.body.get('message', '')}"


@dataclass
class Sink:
    port: int
    posts: list[Post] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, scheme: str = "json", path: str = "hook") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{path}"

    def wait_for(self, count: int, timeout: float = 30) -> list[Post]:
        """The posts once there are `count` (AssertionError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.posts) >= count:
                    return list(self.posts)
            time.sleep(0.02)
        raise AssertionError(f"{count} posts expected, got {self.posts}")


@contextmanager
def notify_sink() -> Iterator[Sink]:
    """A sink on 127.0.0.1 (any free port), answering every POST with 200."""
    holder: dict[str, Sink] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"raw": raw.decode("utf-8", "replace")}
            sink = holder["sink"]
            with sink.lock:
                sink.posts.append(Post(self.path, dict(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["sink"] = Sink(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder["sink"]
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (a dead sink: connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
