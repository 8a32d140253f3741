"""Agent data read a line at a time, each line cut to a bound, so that nothing fks shows of a
log, a diff or a commit message is ever held whole however long its lines are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from sandbox_runner.ui.ansi import strip_escapes

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


def shown_line(raw: bytes, cut: int = 0) -> str:
    """A line of agent data as fks shows it: decoded, neutralised, saying what was cut."""
    text = strip_escapes(raw.decode("utf-8", "replace"), keep="\t")
    return f"{text}… ({cut} more bytes not shown)" if cut else text
