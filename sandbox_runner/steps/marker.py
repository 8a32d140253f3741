"""Completion detection: a stdout line that is exactly FORKHESTRA_COMPLETE.

`PlainMonitor` scans raw chunks (lines reassembled across chunk boundaries) without splitting
every line, so agents that print hundreds of megabytes cost little. `StreamJsonMonitor` reads
an agent CLI's stream (Claude's stream-json, or another CLI's, through its adapter's parser)
and counts the marker only in what the model says, never in tool output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sandbox_runner.agentclis.events import MARKER
from sandbox_runner.backends.api import Stream

if TYPE_CHECKING:
    from sandbox_runner.agentclis.api import StreamParser
    from sandbox_runner.agentclis.events import Event, Result

_MARKER = MARKER.encode()
# A line whose stripped text is the marker cannot be longer than this (marker + whitespace).
_MAX_MARKER_LINE = len(_MARKER) + 256


class Monitor(Protocol):
    """Watches one iteration's output."""

    @property
    def marker_seen(self) -> bool:
        """The completion marker has been seen."""
        ...

    def feed(self, stream: Stream, chunk: bytes) -> list[Event]:
        """Look at a chunk; returns what a display should show instead of raw output."""
        ...

    def finish(self) -> list[Event]:
        """The process ended: handle a last line without a newline."""
        ...


MAX_LINE = 8 * 1024 * 1024
"""Longer stream-json lines are dropped: a container's output must not fill fks's memory."""


class LineBuffer:
    """Reassembles lines from chunks; a line over `limit` bytes is dropped (counted in `dropped`)."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False
        self._limit = limit
        self.dropped = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if self._skipping:
                self._skipping = False
            elif self._size + len(piece) > self._limit:
                self.dropped += 1
            else:
                lines.append(b"".join([*self._parts, piece]))
            self._parts, self._size, start = [], 0, end + 1
        rest = chunk[start:]
        if rest and not self._skipping:
            if self._size + len(rest) > self._limit:
                self._parts, self._size, self._skipping = [], 0, True
                self.dropped += 1
            else:
                self._parts.append(rest)
                self._size += len(rest)
        return lines

    def finish(self) -> list[bytes]:
        rest = b"".join(self._parts)
        self._parts, self._size, self._skipping = [], 0, False
        return [rest] if rest else []


class PlainMonitor:
    """Marker detection for plain agents: stdout only, whole line only."""

    def __init__(self) -> None:
        self.marker_seen = False
        self._tail = b""  # the current (unfinished) stdout line, while it could still be a marker
        self._tail_too_long = False

    def feed(self, stream: Stream, chunk: bytes) -> list[Event]:
        if stream != "stdout" or self.marker_seen:
            return []
        newline = chunk.rfind(b"\n")
        if newline < 0:
            self._extend_tail(chunk)
            return []
        head = chunk[: newline + 1]
        if _MARKER in head or (self._tail and _MARKER in self._tail + head[:_MAX_MARKER_LINE]):
            lines = (self._tail + head).split(b"\n")
            if self._tail_too_long:
                lines = lines[1:]  # the rest of a line already too long to be the marker
            self.marker_seen = any(line.strip() == _MARKER for line in lines)
        self._tail, self._tail_too_long = b"", False
        self._extend_tail(chunk[newline + 1 :])
        return []

    def _extend_tail(self, data: bytes) -> None:
        if self._tail_too_long:
            return
        self._tail += data
        if len(self._tail) > _MAX_MARKER_LINE:
            self._tail, self._tail_too_long = b"", True

    def finish(self) -> list[Event]:
        if not self._tail_too_long and self._tail.strip() == _MARKER:
            self.marker_seen = True
        self._tail = b""
        return []


class StreamJsonMonitor:
    """Marker detection and progress events for an agent CLI's stream (Claude's
    `--output-format stream-json` unless another `parser` is given)."""

    def __init__(self, parser: StreamParser | None = None) -> None:
        from sandbox_runner.agentclis.claude import StreamJsonParser

        self._parser: StreamParser = parser if parser is not None else StreamJsonParser()
        self._lines = LineBuffer()

    @property
    def marker_seen(self) -> bool:
        return self._parser.marker_seen

    @property
    def result(self) -> Result | None:
        """The final `result` event, once seen."""
        return self._parser.result

    @property
    def session_id(self) -> str | None:
        return self._parser.session_id

    @property
    def running_cost(self) -> float | None:
        """What the iteration has spent so far, at least (from its messages' usage); None once
        the result is in (the agent is ending on its own)."""
        if self._parser.result is not None:
            return None
        return self._parser.running_cost

    @property
    def turns(self) -> int:
        """The turns the stream shows begun."""
        return self._parser.turns

    @property
    def unreachable(self) -> bool:
        """The CLI waits, without end, for an API it cannot reach."""
        return self._parser.unreachable

    def feed(self, stream: Stream, chunk: bytes) -> list[Event]:
        if stream != "stdout":
            return []
        events: list[Event] = []
        for line in self._lines.feed(chunk):
            events += self._parser.feed_line(line.decode("utf-8", "replace"))
        return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        for line in self._lines.finish():
            events += self._parser.feed_line(line.decode("utf-8", "replace"))
        return events + self._parser.close()
