"""Everything the user sees while a run goes: `[fks] …` lines, agent output, Claude progress.

`PlainReporter` writes line by line with no escape sequences or control characters (pipes, CI,
`--verbose`); every line the agent wrote starts with `AGENT_PREFIX`, so that an agent line
reading `[fks] Chain complete` cannot pass for one of fks's own;
`sandbox_runner.console.live.LiveReporter` draws a live view on a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from sandbox_runner.agentclis.events import AssistantText, Result, ToolCall
from sandbox_runner.backends.api import Phase, Stream
from sandbox_runner.console.ansi import EscapeFilter, strip_escapes
from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import Status

if TYPE_CHECKING:
    from sandbox_runner.agentclis.events import Event
    from sandbox_runner.results.ended import IterationResult, StepOutcome

PREFIX = "[fks]"
AGENT_PREFIX = "  │ "
"""The start of every line of agent output in plain output (as CI logs of other runners do)."""
_AGENT_PREFIX = AGENT_PREFIX.encode()
# A message running over several lines: the ones after the first are indented under it.
_CONTINUATION = f"\n{PREFIX}   "
_TEXT_KEEPS = "\t\n"
# For --verbose: the lines describing step N (1-based) before it runs (command, cwd, prompt).
StepDetails = Callable[[int], list[str]]


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 attempt`, `2 attempts` (`many` for words that do not just take an s)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def iteration_limit(iterations: int, loop: bool) -> str:
    """How often a step runs: `max 3 iterations`, or `once` for a step without :N."""
    return f"max {plural(iterations, 'iteration')}" if loop else "once"


class PlainReporter:
    """Seed-style line output. `[fks]` lines go to `out` (stderr under --json)."""

    def __init__(
        self,
        *,
        out: IO[str] | None = None,
        agent_out: IO[bytes] | None = None,
        verbose: bool = False,
        details: StepDetails | None = None,
    ) -> None:
        self._out = out or sys.stdout
        self._details = details
        self._agent_out = agent_out or sys.stdout.buffer
        self._agent_err = sys.stderr.buffer
        self._verbose = verbose
        self._at_line_start: dict[Stream, bool] = {"stdout": True, "stderr": True}
        # A colour code or window title from an agent would end up verbatim in a CI log.
        self._filters: dict[Stream, EscapeFilter] = {
            "stdout": EscapeFilter(),
            "stderr": EscapeFilter(),
        }

    def _line(self, text: str) -> None:
        self._end_partial_lines()
        text = strip_escapes(text, keep=_TEXT_KEEPS).rstrip("\n").replace("\n", _CONTINUATION)
        self._out.write(f"{PREFIX} {text}\n")
        self._out.flush()

    def _agent_line(self, text: str) -> None:
        text = strip_escapes(text, keep=_TEXT_KEEPS).rstrip("\n")
        if text:
            self._end_partial_lines()
            self._out.write(_prefixed(f"{text}\n".encode(), at_line_start=True).decode())
            self._out.flush()

    def _end_partial_lines(self) -> None:
        # Agent output that ended mid-line must not glue onto our next line.
        for stream in self._filters:
            self._write(stream, self._filters[stream].flush())
            if not self._at_line_start[stream]:
                self._write(stream, b"\n")

    def _write(self, stream: Stream, data: bytes) -> None:
        if not data:
            return
        target = self._agent_out if stream == "stdout" else self._agent_err
        target.write(_prefixed(data, at_line_start=self._at_line_start[stream]))
        target.flush()
        self._at_line_start[stream] = data.endswith(b"\n")

    def info(self, message: str) -> None:
        self._line(message)

    def warn(self, message: str) -> None:
        self._line(f"Warning: {message}")

    def phase(self, phase: Phase) -> None:
        if self._verbose:
            self._line(f"  {phase_text(phase)}")

    def step_started(self, index: int, total: int, agent: str, iterations: int, loop: bool) -> None:
        if index > 1:
            self._end_partial_lines()
            self._out.write("\n")
        if loop:
            self._line(f"Starting: {agent} (max {plural(iterations, 'iteration')})")
        else:
            self._line(f"Running: {agent}")
        for line in self._details(index) if self._details else ():
            self._line(f"  {line}")

    def iteration_started(self, number: int, maximum: int, loop: bool) -> None:
        if loop:
            self._line(f"Iteration {number}/{maximum}")

    def output(self, stream: Stream, chunk: bytes) -> None:
        self._write(stream, self._filters[stream].feed(chunk))

    def events(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, ToolCall):  # the agent's call: its line, as its text's
                self._agent_line(f"→ {event.summary.splitlines()[0] if event.summary else ''}")
            elif isinstance(event, AssistantText):
                self._agent_line(event.text)
            elif isinstance(event, Result):
                self._line(event.summary_line())

    def iteration_ended(self, result: IterationResult) -> None:
        if result.note:
            self._line(result.note)

    def step_ended(self, agent: str, outcome: StepOutcome, loop: bool) -> None:
        if outcome.complete:
            self._line(outcome.end_line(agent, loop))
        else:
            self._line(f"Incomplete: {agent} {outcome.describe()}")

    def chain_ended(self, complete: bool, done: int, total: int, cost: float | None) -> None:
        self._end_partial_lines()
        self._out.write("\n")
        self._line(closing_line(complete, done, total, cost))

    def close(self) -> None:
        self._end_partial_lines()


def phase_text(phase: Phase) -> str:
    """`checkout: 9.81s`, `workspace: 0.05s (Docker volume fks-ws-…)`."""
    took = f"{phase.seconds:.2f}s" if phase.seconds < 10 else f"{phase.seconds:.1f}s"
    return f"{phase.name}: {took}" + (f" ({phase.detail})" if phase.detail else "")


def closing_line(complete: bool, done: int, total: int, cost: float | None) -> str:
    """A run's last line, the same for every run (one step or many, looping or not), for CI
    and scripts to match: `Chain complete (2/2 steps)`, `Chain incomplete (0/2 steps, $0.0120)`."""
    spent = f", {usd(cost)}" if cost else ""
    status = Status.COMPLETE if complete else Status.INCOMPLETE
    return f"Chain {status} ({done}/{total} steps{spent})"


def _prefixed(data: bytes, *, at_line_start: bool) -> bytes:
    """`data` (agent output, escapes already stripped) with `AGENT_PREFIX` starting each line."""
    body = data.replace(b"\n", b"\n" + _AGENT_PREFIX)
    if data.endswith(b"\n"):
        body = body[: -len(_AGENT_PREFIX)]
    return _AGENT_PREFIX + body if at_line_start else body
