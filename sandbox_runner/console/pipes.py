"""Standard output whose reader may go away (`fks run … | head -3`): once the pipe is closed,
output is dropped and the work goes on, instead of the next `print` failing the run."""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class _Tolerant(io.RawIOBase):
    """A file descriptor whose writes succeed (and are dropped) once the reader has gone."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self.gone:
            return size
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            self.gone = True
            return size


def _tolerant(stream: TextIO) -> TextIO:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (tests capture output)
        return stream
    stream.flush()
    return io.TextIOWrapper(
        io.BufferedWriter(_Tolerant(fd)),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=bool(stream.line_buffering),
        write_through=getattr(stream, "write_through", False),
    )


def tolerate_closed_pipes() -> None:
    """Make stdout and stderr drop output once their reader has gone."""
    sys.stdout = _tolerant(sys.stdout)
    sys.stderr = _tolerant(sys.stderr)
