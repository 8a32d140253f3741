"""A proxy's access log followed as Squid writes it: its lines read in a thread
(`access_log.read_lines`), each request counted in bounded memory (`audit.TrafficCounter`)
until the next take. The egress proxy of one engine and that of a swarm are both such a log:
each opens its own stream, and may read more than requests from its lines.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from sandbox_runner.backends.docker.egress.access_log import AccessLine, access_line, read_lines
from sandbox_runner.backends.docker.egress.audit import Traffic, TrafficCounter
from sandbox_runner.backends.docker.egress.metering import Spends
from sandbox_runner.backends.docker.egress.refusals import Refusals
from sandbox_runner.errors import SandboxError

SETTLE_S = 0.05  # after an iteration ends, the longest its refusals' lines take to arrive
QUIET_S = 0.1  # a log with no line for this long has caught up (lines come in bursts)
CATCH_UP_S = 2.0  # the longest a settled take waits for a busy log to catch up


class FollowedLog:
    """What the egress proxies share of their access log: following it, counting it, taking
    what was counted. A proxy says whether it runs (`_running`) and opens the stream."""

    def __init__(self) -> None:
        self._log_lock = threading.Lock()
        self._traffic = TrafficCounter()  # the access log's requests since the last take
        self._log_stream: Any = None
        self._last_line = 0.0  # time.monotonic() of the last line read
        self.spends = Spends()
        """The meter's figures, from its lines on the same output."""

    def take_denied(self, *, settled_at: float | None = None) -> Refusals:
        """Requests the allow-list refused since the last take (or the start): those of
        `take_traffic` (whose other requests this take drops)."""
        return self.take_traffic(settled_at=settled_at).refusals

    def take_traffic(self, *, settled_at: float | None = None) -> Traffic:
        """Every request made through the proxy since the last take (or the start), and those
        the allow-list refused, read from Squid's access log on the proxy container's output.

        A request's line reaches that output a moment after the agent got its answer, so one
        made just before the take may be in the next one; with `settled_at` (a time.time(),
        such as when the step's last iteration ended plus SETTLE_S) the take first waits until
        then. Each line is counted once: iterations of a step that follow each other within a
        second each get their own. A log still taking lines then (a flood of requests, a slow
        machine) is first given up to CATCH_UP_S to fall quiet."""
        if not self._running():
            raise SandboxError("The egress proxy is not running (outside its `with` block)")
        if settled_at is not None:
            time.sleep(max(0.0, min(SETTLE_S, settled_at - time.time())))
            self._catch_up()
        with self._log_lock:
            return self._traffic.take()

    def _catch_up(self) -> None:
        """Wait until no line has come for QUIET_S, CATCH_UP_S at most."""
        deadline = time.monotonic() + CATCH_UP_S
        while (now := time.monotonic()) < deadline and now - self._last_line < QUIET_S:
            time.sleep(QUIET_S / 4)

    def _running(self) -> bool:
        raise NotImplementedError

    def _open_log(self) -> Any:
        """The proxy's output (Squid's access log), followed: an iterable of byte chunks."""
        raise NotImplementedError

    def _follow_in_thread(self) -> None:
        threading.Thread(target=self._follow_log, name="fks-egress-log", daemon=True).start()

    def _follow_log(self) -> None:
        """In a thread: each line of the proxy's output as it comes (`_take_line`)."""
        with contextlib.suppress(Exception):  # the proxy may be gone already (Ctrl-C)
            self._log_stream = self._open_log()
            read_lines(self._log_stream, self._take_line)

    def _take_line(self, line: str) -> None:
        """Count the request of one line of the access log, or take a meter's line (any other
        line is ignored)."""
        self._last_line = time.monotonic()
        found = access_line(line)
        if found is not None:
            self._count(found)
        else:
            self.spends.take_line(line)

    def _count(self, request: AccessLine) -> None:
        """Count a request of the access log (TrafficCounter: in bounded memory)."""
        with self._log_lock:
            self._traffic.add(request)

    def _close_log(self) -> None:
        if self._log_stream is not None:
            with contextlib.suppress(Exception):
                self._log_stream.close()
