"""Agent data read a line at a time, each line cut to a bound, so that nothing fks shows of a
log, a diff or a commit message is ever held whole however long its lines are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.units import byte_count

LINE_BYTES = 4096
"""Bytes shown of one line of agent output."""
_SKIP_CHUNK = 65536


def bounded_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[bytes, int]]:
    """Each line of `stream` without its newline, cut to `limit` bytes, with the number of bytes
    cut; what is cut is read and dropped, never kept."""
    while line := stream.readline(limit + 1):
        if line.endswith(b"\n"):
            yield line[:-1], 0
        elif len(line) <= limit:
            yield line, 0  # the last line, without a newline
        else:
            yield line[:limit], len(line) - limit + _skip_line(stream)


def _skip_line(stream: IO[bytes]) -> int:
    """Reads up to the end of the line; returns how many bytes it held before the newline."""
    skipped = 0
    while more := stream.readline(_SKIP_CHUNK):
        if more.endswith(b"\n"):
            return skipped + len(more) - 1
        skipped += len(more)
    return skipped


class LineReader:
    """The lines a growing file gained since the last `read`, each cut to `limit` bytes.

    An unfinished last line is left for the next read (unless `final`); of an over-long line
    only its first `limit` bytes are kept until its end arrives.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._offset = 0
        self._head: bytes | None = None
        self._cut = 0

    def read(self, log: IO[bytes], *, final: bool) -> Iterator[tuple[bytes, int]]:
        log.seek(self._offset)
        while line := log.readline(_SKIP_CHUNK if self._head is not None else self._limit + 1):
            ended = line.endswith(b"\n")
            if self._head is not None:
                self._cut += len(line) - ended
                if ended:
                    yield self._take()
            elif ended:
                yield line[:-1], 0
            elif len(line) > self._limit:
                self._head, self._cut = line[: self._limit], len(line) - self._limit
            elif final:
                yield line, 0
            else:
                return  # unfinished: read again once it is
            self._offset = log.tell()
        if final and self._head is not None:
            yield self._take()

    def _take(self) -> tuple[bytes, int]:
        head, cut = self._head or b"", self._cut
        self._head, self._cut = None, 0
        return head, cut


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, saying how much was cut."""
    if len(text) <= width:
        return text
    return f"{text[:width]}… ({len(text) - width} more characters)"


def shown_line(raw: bytes, cut: int = 0, *, limit: int = LINE_BYTES) -> str:
    """A line of agent data as fks shows it: at most `limit` bytes of it, decoded,
    neutralised, saying how many bytes were cut."""
    if len(raw) > limit:
        raw, cut = raw[:limit], cut + len(raw) - limit
    text = strip_escapes(raw.decode("utf-8", "replace"), keep="\t")
    return f"{text}… ({byte_count(cut, more=True)} not shown)" if cut else text
