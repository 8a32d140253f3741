"""A swarm service's log stream read into a bounded queue: multiplexed frames, each
`<timestamp> <bytes>`; once the service's task has ended, one more read from a little before
the last timestamp takes what the stream had not brought yet."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import queue
import re
import socket
import struct
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import Stream
from sandbox_runner.backends.docker.engine.client import with_retries
from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker

_QUEUE_CHUNKS = 64  # bounded: a fast agent is slowed down rather than buffered in memory
_LATE_OUTPUT_S = (0.0, 0.5, 1.0)
"""Pauses before each read of what a task's log stream had not brought when the task ended
(its node may hand over a last unterminated line more than half a second late); after the
first, none once the output is known complete (`LogPump.settle`)."""
_MARGIN_NS = 2 * 10**9
"""How far before the last timestamp delivered a catch-up read starts: a node stamps a line
when it reads it, and may hand over an unterminated one (stamped then) only at the
container's exit, after later lines of the other stream."""
_RECENT_LIMIT = 50_000  # frames remembered for that margin, at most
_HEADER = struct.Struct(">BxxxL")
_STREAMS: dict[int, Stream] = {1: "stdout", 2: "stderr"}
_TIMESTAMP = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


class LogPump:
    """Reads a service's log stream (multiplexed frames, each `<timestamp> <bytes>`) into a
    bounded queue. Following never ends by itself, so `finish()` stops it once the task has
    ended and one more read, since the last timestamp delivered, takes what it had not yet
    brought (a log stream lags behind its task and may hold back a last unterminated line)."""

    def __init__(self, client: docker.DockerClient, service_id: str) -> None:
        self._client = client
        self._service = service_id
        self.chunks: queue.Queue[tuple[Stream, bytes] | BaseException | None] = queue.Queue(
            _QUEUE_CHUNKS
        )
        self._recent = _Recent()
        self._response: Any = None
        self._finishing = threading.Event()
        self._settled = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        self._response = response = self._open(follow=True)
        with contextlib.suppress(Exception):  # an agent may print nothing for a long while
            api = self._client.api
            api._disable_socket_timeout(api._get_raw_response_socket(response))
        threading.Thread(
            target=self._run,
            args=(response,),
            name=f"fks-service-logs-{self._service[:12]}",
            daemon=True,
        ).start()

    def _open(self, *, follow: bool) -> Any:
        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "timestamps": 1, "follow": int(follow)}
        since = self._recent.since()
        if not follow and since is not None:
            params["since"] = f"{since // 10**9}.{since % 10**9:09d}"
        api = self._client.api
        url = api._url("/services/{0}/logs", self._service)
        response = with_retries("service logs", lambda: api._get(url, params=params, stream=True))
        api._raise_for_status(response)
        return response

    def _run(self, response: Any) -> None:
        try:
            with contextlib.suppress(Exception):
                self._read(response, catching_up=False)
            with contextlib.suppress(Exception):
                response.close()
            if not self._finishing.is_set():
                raise SandboxError("the stream ended before the task did")
            # The node may write the last output (an unterminated line, flushed at the
            # container's exit) a moment after the manager reports the task ended: read again.
            for pause in _LATE_OUTPUT_S:
                if self._settled.wait(pause) and pause:
                    break  # what came after the first read's is all there was
                if self._closed.is_set():
                    break
                rest = self._open(follow=False)
                try:
                    self._read(rest, catching_up=True)
                finally:
                    rest.close()
        except Exception as exc:  # surfaced to the reading thread
            self._put(exc)
        finally:
            self._put(None)

    def _read(self, response: Any, *, catching_up: bool) -> None:
        """Deliver every whole frame; catching up, none delivered already."""
        delivered = self._recent.counted() if catching_up else None
        while not self._closed.is_set():
            header = _read_exactly(response.raw, _HEADER.size)
            if header is None:
                return
            number, length = _HEADER.unpack(header)
            payload = _read_exactly(response.raw, length)
            if payload is None:
                return
            stamp, data = _split_timestamp(payload)
            if stamp is not None:
                key = (stamp, number, hashlib.blake2b(data, digest_size=8).digest())
                if delivered is not None and delivered[key] > 0:
                    delivered[key] -= 1
                    continue
                self._recent.add(key)
            if data and number in _STREAMS:
                self._put((_STREAMS[number], data))

    def _put(self, item: tuple[Stream, bytes] | BaseException | None) -> None:
        while not self._closed.is_set():
            with contextlib.suppress(queue.Full):
                self.chunks.put(item, timeout=0.5)
                return

    def settle(self) -> None:
        """The task's last line came (its script's closing report): once the task has ended,
        one read catches up and no later one waits for more."""
        self._settled.set()

    def finish(self) -> None:
        """The task has ended: stop following, then catch up."""
        self._finishing.set()
        self._unblock()

    def close(self) -> None:
        self._closed.set()
        self._unblock()

    def _unblock(self) -> None:
        """Shut the stream's socket down: the pump's blocked read returns (closing the response
        here instead would wait for that read)."""
        with self._lock:
            response, self._response = self._response, None
        if response is None:
            return
        with contextlib.suppress(Exception):
            raw = self._client.api._get_raw_response_socket(response)
            getattr(raw, "_sock", raw).shutdown(socket.SHUT_RDWR)


def _read_exactly(raw: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        part = raw.read(size - len(data))
        if not part:
            return None
        data += part
    return data


def _split_timestamp(payload: bytes) -> tuple[int | None, bytes]:
    """`2026-01-02T03:04:05.123456789Z <data>` -> (nanoseconds since the epoch, data)."""
    match = _TIMESTAMP.match(payload)
    if match is None:
        return None, payload
    zone = match.group(3).decode().replace("Z", "+00:00")
    seconds = int(datetime.fromisoformat(match.group(1).decode() + zone).timestamp())
    nanos = int((match.group(2) or b"0").ljust(9, b"0"))
    return seconds * 10**9 + nanos, payload[match.end() :]


class _Recent:
    """The frames delivered within `_MARGIN_NS` of the newest (timestamp, stream, digest),
    counted: a catch-up read starts that far back and skips as many of each."""

    def __init__(self) -> None:
        self._order: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self._count: collections.Counter[tuple[int, int, bytes]] = collections.Counter()
        self._newest: int | None = None
        self._floor = 0  # nothing stamped before it is remembered within the margin

    def add(self, key: tuple[int, int, bytes]) -> None:
        self._order.append(key)
        self._count[key] += 1
        self._newest = key[0] if self._newest is None else max(self._newest, key[0])
        while self._order and (
            self._order[0][0] < self._newest - _MARGIN_NS or len(self._order) > _RECENT_LIMIT
        ):
            old = self._order.popleft()
            if old[0] >= self._newest - _MARGIN_NS:  # forgotten for room, not for age
                self._floor = max(self._floor, old[0] + 1)
            self._count[old] -= 1
            if self._count[old] <= 0:
                del self._count[old]

    def counted(self) -> collections.Counter[tuple[int, int, bytes]]:
        """A copy of the frames remembered, each with how many times it was delivered."""
        return collections.Counter(self._count)

    def since(self) -> int | None:
        """Where a catch-up read starts: the margin before the newest frame (later, if frames
        in it had to be forgotten: nothing delivered is delivered again)."""
        if self._newest is None:
            return None
        return max(self._newest - _MARGIN_NS, self._floor)
