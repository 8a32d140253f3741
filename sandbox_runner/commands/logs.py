"""`fks logs RUN [STEP]`: what the agent wrote in each iteration, made readable (a Claude
transcript rendered as text, anything else neutralised), or with `--raw` the bytes as written."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from sandbox_runner.commands.runs import load_run, open_store, run_status, step_status
from sandbox_runner.console.lines import LineReader, shown_line
from sandbox_runner.console.output import AGENT_PREFIX
from sandbox_runner.console.transcript import TranscriptRenderer, is_transcript
from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.records.places import log_path
from sandbox_runner.records.record import IterationRecord, RunRecord, StepRecord, run_alive

FOLLOW_INTERVAL = 0.2
"""Seconds between polls of run.json and the log files under `fks logs --follow`."""
EVENT_BYTES = 8 << 20
"""Bytes of one log line read for rendering (a stream-json event with a big tool result)."""


@dataclass(frozen=True)
class _Selection:
    step: int | None
    iteration: int | None

    def pick(self, record: RunRecord) -> list[tuple[StepRecord, IterationRecord]]:
        picked: list[tuple[StepRecord, IterationRecord]] = []
        for step in record.steps:
            if self.step is not None and step.index != self.step:
                continue
            picked.extend(
                (step, it)
                for it in step.iterations
                if it.log and (self.iteration is None or it.number == self.iteration)
            )
        return picked


@dataclass(frozen=True)
class LogsOptions:
    """`fks logs`'s: which run's logs, which of them, and how."""

    run_ref: str = "last"
    step: int | None = None
    iteration: int | None = None
    follow: bool = False
    """Keep printing until the run stops."""
    raw: bool = False
    """The bytes as written, not made readable."""
    full: bool = False
    """A Claude transcript's tool calls and their results whole, not cut to a line."""
    cwd: Path | None = None


def logs(options: LogsOptions) -> int:
    """Print iteration logs (readable, or raw); when following, keep printing until the run stops."""
    if options.full and options.raw:
        raise UsageError("--full goes without --raw, which prints the bytes as written anyway")
    store = open_store(options.cwd)
    record = load_run(store, options.run_ref)
    following = options.follow and run_alive(record)
    selection = _select(record, options.step, options.iteration, following=following)
    sys.stdout.flush()
    printer = _LogPrinter(
        sys.stdout.buffer,
        # Following, more iterations may come: headers whether or not the run is still going
        # when this starts, so what --follow prints does not depend on when it started.
        headers=options.iteration is None and (options.follow or len(selection.pick(record)) > 1),
        raw=options.raw,
        full=options.full,
    )
    run_dir = store.run_dir(record.id)
    while True:
        running = following and run_alive(record)
        for step_record, it in selection.pick(record):
            final = not running or it.ended is not None
            # Only a log in the run's own folder: a record may name any file (`/dev/zero`).
            if (path := log_path(run_dir, it.log)) is not None:
                printer.copy(step_record, it, path, final=final)
        if not running:
            if not printer.printed_any:
                _nothing_yet(record, selection.step)
            return EXIT_COMPLETE
        time.sleep(FOLLOW_INTERVAL)
        try:
            record = store.load(record.id)
        except FksError:
            continue  # removed or replaced under us; try again on the next poll


def _select(
    record: RunRecord, step: int | None, iteration: int | None, *, following: bool
) -> _Selection:
    """What to print; a STEP or iteration the run does not have is a usage error."""
    if iteration is not None and step is None:
        if len(record.steps) != 1:
            raise UsageError(
                f"--iteration needs a STEP: e.g. fks logs {record.id} 1 --iteration {iteration}"
            )
        step = record.steps[0].index
    if step is not None and not 1 <= step <= len(record.steps):
        raise UsageError(
            f"run {record.id} has {_count(len(record.steps), 'step')}; "
            f"STEP must be {_one_to(len(record.steps))}"
        )
    selection = _Selection(step, iteration)
    if iteration is not None and not selection.pick(record) and not following:
        chosen = record.steps[step - 1] if step is not None else record.steps[0]
        numbers = sorted({it.number for it in chosen.iterations})
        ran = (
            "ran no iterations"
            if not numbers
            else f"ran iteration{'' if numbers[-1] == 1 else 's'} {_one_to(numbers[-1])}"
        )
        raise UsageError(
            f"step {chosen.index} ({chosen.agent}) of run {record.id} {ran}; there is no iteration {iteration}"
        )
    return selection


def _one_to(n: int) -> str:
    """`1-3`, or just `1`."""
    return "1" if n == 1 else f"1-{n}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _nothing_yet(record: RunRecord, step: int | None) -> None:
    if step is not None:
        chosen = record.steps[step - 1]
        state = step_status(chosen, run_status(record))
        print(
            f"fks: no output recorded for step {chosen.index} ({chosen.agent}) of run {record.id} ({state})",
            file=sys.stderr,
        )
    else:
        print(
            f"fks: no output recorded for run {record.id} ({run_status(record)})", file=sys.stderr
        )


@dataclass
class _Log:
    """How far one log was printed, and how its lines are shown."""

    reader: LineReader = field(default_factory=lambda: LineReader(EVENT_BYTES))
    offset: int = 0
    """Bytes copied so far (--raw)."""
    transcript: TranscriptRenderer | None = None
    started: bool = False


class _LogPrinter:
    """Prints each log once, continuing where the last call stopped (for --follow)."""

    def __init__(self, out: BinaryIO, *, headers: bool, raw: bool, full: bool = False) -> None:
        self._out = out
        self._headers = headers
        self._raw = raw
        self._full = full
        self._logs: dict[Path, _Log] = {}
        self._at_line_start = True
        self.printed_any = False

    def copy(self, step: StepRecord, it: IterationRecord, path: Path, *, final: bool) -> None:
        if path not in self._logs:
            # A Claude step's record has its stats; one killed before its result has not.
            claude = TranscriptRenderer(full=self._full) if it.claude is not None else None
            self._logs[path] = _Log(transcript=claude)
            self._header(step, it)
        log = self._logs[path]
        try:
            with path.open("rb") as stream:
                if self._raw:
                    self._copy_raw(stream, log)
                else:
                    self._render(stream, log, final=final)
        except FileNotFoundError:
            return

    def _copy_raw(self, stream: BinaryIO, log: _Log) -> None:
        stream.seek(log.offset)
        while chunk := stream.read(65536):
            self._write(chunk)
            log.offset += len(chunk)

    def _render(self, stream: BinaryIO, log: _Log, *, final: bool) -> None:
        for raw, cut in log.reader.read(stream, final=final):
            if not log.started:
                log.started = True
                if log.transcript is None and is_transcript(raw):
                    log.transcript = TranscriptRenderer(full=self._full)
            if log.transcript is not None:
                lines = log.transcript.lines(raw, cut)
            else:
                lines = [shown_line(raw, cut)]
            # Between fks's headers, the agent's lines are marked as in plain output: no line
            # of the agent's can pass for a header.
            lead = AGENT_PREFIX if self._headers else ""
            if lines:
                text = "".join(f"{lead}{line}\n" for line in lines)
                self._write(text.encode("utf-8", "replace"))

    def _header(self, step: StepRecord, it: IterationRecord) -> None:
        if not self._headers:
            return
        note = " (not counted)" if not it.counted and it.ended is not None else ""
        text = f"==> step {step.index} ({step.agent}) iteration {it.number}{note} <=="
        lead = b"" if not self.printed_any else (b"\n" if self._at_line_start else b"\n\n")
        self._write(lead + text.encode("utf-8", "replace") + b"\n")

    def _write(self, data: bytes) -> None:
        if not data:
            return
        self._out.write(data)
        self._out.flush()
        self._at_line_start = data.endswith(b"\n")
        self.printed_any = True
