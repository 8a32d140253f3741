"""The HTTP server under `fks ui`: uvicorn with h11, bounded against a flood from any local
process (no token is needed to open a connection). uvicorn waits for a request's head without
limit and keeps every connection it accepts, so 1,000 half-sent requests would hold all of the
process's file descriptors and the owner's pages would never be accepted; its own
`limit_concurrency` answers 503 to everyone once the flood holds the slots. Here:

- a request's head must arrive within `HEAD_TIMEOUT` seconds of the connection (or of the end
  of the previous answer on it), else the connection is closed;
- an idle kept-alive connection is closed after `IDLE_TIMEOUT` seconds;
- at most `MAX_CONNECTIONS` connections are kept: one more closes the one that has waited
  longest without a request in progress (a connection answering a request is never cut), so
  a browser's fresh connection, which sends its request at once, is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0
"""Seconds a connection may take to send a request's head."""
IDLE_TIMEOUT = 5
"""Seconds a kept-alive connection may stay idle between requests."""
MAX_CONNECTIONS = 256
"""Connections kept open at once (a browser opens about six per page; live streams are 32 at
most), well below the 1,024 descriptors a process gets by default."""
ACCEPT_BATCH = 128
"""Connections accepted in one go before the new ones are looked at (and the cap applied),
and the listening socket's backlog."""


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head and a connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting_since = 0.0
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()
        if len(self.connections) > MAX_CONNECTIONS:
            _longest_waiting(self.connections).transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self._answering() and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._waiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self.transport.close)

    def _answering(self) -> bool:
        """A request's head arrived and its answer is not complete."""
        return self.cycle is not None and not self.cycle.response_complete


def _longest_waiting(connections: set[Any]) -> H11Protocol:
    """The connection without a request in progress that has waited longest (the newest one
    when every other is answering a request)."""
    waiting = [
        c
        for c in connections
        if isinstance(c, BoundedH11Protocol)
        and not c._answering()
        and not c.transport.is_closing()  # closed already, gone on the next turn of the loop
    ]
    return min(waiting, key=lambda c: c._waiting_since)


def serve(app: Any, listener: socket.socket, *, grace: int) -> None:
    """Serve `app` on `listener` until Ctrl-C (open pages get `grace` seconds to close)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=BoundedH11Protocol,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=grace,
        timeout_keep_alive=IDLE_TIMEOUT,
        backlog=ACCEPT_BATCH,
    )
    # uvicorn stops on Ctrl-C, then raises it again: stopping is how `fks ui` ends.
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[listener])
