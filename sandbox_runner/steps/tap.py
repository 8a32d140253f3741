"""An iteration's output on its way to the log, the screen and the monitor: masked, and bounded
per iteration and per run, so an agent printing without end cannot fill the disk.

Output past the bound is neither kept nor shown, but the monitor still reads it (a marker
printed after the cut still counts) and the agent keeps running; the log says where it was cut
and the iteration's record how much was dropped (`log_dropped`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sandbox_runner.backends.api import Stream
from sandbox_runner.console.units import byte_count
from sandbox_runner.errors import UsageError
from sandbox_runner.records.masking import Masker
from sandbox_runner.steps.marker import Monitor
from sandbox_runner.steps.reporter import Reporter

if TYPE_CHECKING:
    from sandbox_runner.agentclis.events import Event
    from sandbox_runner.plan.config import ChainsConfig

DEFAULT_MAX_LOG_BYTES = 100 * 2**20
DEFAULT_MAX_RUN_LOG_BYTES = 2**30
ENV_MAX_LOG_BYTES = "FKS_MAX_LOG_BYTES"
ENV_MAX_RUN_LOG_BYTES = "FKS_MAX_RUN_LOG_BYTES"
NOTE_ROOM = 512
"""Bytes of the bound kept for fks's own notes about the cut (so the file stays within it)."""
_ERROR_TAIL_BYTES = 2048


@dataclass(frozen=True)
class LogLimits:
    """How many bytes of output the logs keep: per iteration, and for the whole run."""

    iteration: int = DEFAULT_MAX_LOG_BYTES
    run: int = DEFAULT_MAX_RUN_LOG_BYTES

    @classmethod
    def resolve(
        cls,
        iteration: int | None = None,
        run: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> LogLimits:
        """The environment's (FKS_MAX_LOG_BYTES, FKS_MAX_RUN_LOG_BYTES), else the config's
        (`iteration`, `run`), else the defaults."""
        env = os.environ if environ is None else environ
        return cls(
            iteration=_env_bytes(env, ENV_MAX_LOG_BYTES) or iteration or DEFAULT_MAX_LOG_BYTES,
            run=_env_bytes(env, ENV_MAX_RUN_LOG_BYTES) or run or DEFAULT_MAX_RUN_LOG_BYTES,
        )

    @classmethod
    def of_config(cls, config: ChainsConfig | None) -> LogLimits:
        """The environment's limits, else `config`'s, else the defaults."""
        if config is None:
            return cls.resolve()
        return cls.resolve(config.max_log_bytes, config.max_run_log_bytes)


def _env_bytes(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 0:
        raise UsageError(f"{name} must be a positive number of bytes, got {raw[:40]!r}")
    return int(raw)


class OutputTap:
    """Masks an iteration's output, writes it to the log as it arrives (up to `limit` bytes),
    feeds the monitor and shows it."""

    def __init__(
        self,
        *,
        monitor: Monitor,
        reporter: Reporter,
        stream_json: bool,
        secrets: Sequence[str],
        log_path: Path | None,
        limit: int,
        what: str,
    ) -> None:
        """`limit`: the bytes this iteration's log may take (notes included); `what`: how the
        limit is named to the user when it is reached (`the log limit of …`)."""
        self._monitor = monitor
        self._reporter = reporter
        self._stream_json = stream_json
        self._log_path = log_path
        self._room = max(0, limit - NOTE_ROOM)
        self._notes = limit >= NOTE_ROOM
        self._what = what
        self._log: IO[bytes] | None = None
        self._maskers: dict[Stream, Masker] = {"stdout": Masker(secrets), "stderr": Masker(secrets)}
        self._stderr_tail = b""
        self._exit = contextlib.ExitStack()
        self.output_kept = 0
        self.written = 0
        """Bytes written to the log: output and notes."""
        self.dropped = 0
        """Bytes of output past the bound: not kept, not shown."""

    def __enter__(self) -> OutputTap:
        if self._log_path is not None:
            # Unbuffered: a crash or kill -9 leaves everything written so far on disk.
            self._log = self._exit.enter_context(self._log_path.open("ab", buffering=0))
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.dropped:
                kept = byte_count(self.dropped)
                self._note(f"\n[fks] {kept} of output were not kept in this log\n")
        finally:
            self._exit.close()

    def feed(self, stream: Stream, chunk: bytes) -> None:
        self._emit(stream, self._maskers[stream].feed(chunk))

    def finish(self) -> None:
        for stream, masker in self._maskers.items():
            self._emit(stream, masker.finish())
        events = self._monitor.finish()
        if not self.dropped:
            self._show(events)

    def _emit(self, stream: Stream, data: bytes) -> None:
        if not data:
            return
        fits = data[: max(0, self._room - self.output_kept)]
        if fits and self._log is not None:
            self._log.write(fits)
            self.written += len(fits)
        self.output_kept += len(fits)
        if len(fits) < len(data):
            self._cut(len(data) - len(fits))
        events = self._monitor.feed(stream, data)  # a marker past the cut still counts
        if self._stream_json and stream == "stdout":
            if not self.dropped:
                self._show(events)
        elif fits:
            self._reporter.output(stream, fits)
        if stream == "stderr":
            self._stderr_tail = (self._stderr_tail + data)[-_ERROR_TAIL_BYTES:]

    def _cut(self, size: int) -> None:
        if not self.dropped:
            self._note(
                f"\n[fks] output cut here: it passed {self._what}; the rest of this "
                "iteration's output is not kept\n"
            )
            self._reporter.warn(
                f"the agent's output passed {self._what}: the rest of this iteration's output "
                "is neither kept nor shown (the agent keeps running)"
            )
        self.dropped += size

    def _note(self, text: str) -> None:
        if self._log is not None and self._notes:
            data = text.encode()[: NOTE_ROOM // 2]
            self._log.write(data)
            self.written += len(data)

    def _show(self, events: Sequence[Event]) -> None:
        if events:
            self._reporter.events(events)

    def stderr_tail(self) -> str | None:
        text = self._stderr_tail.decode("utf-8", "replace").strip()
        return "\n".join(text.splitlines()[-20:]) or None
