"""The live view on a terminal: a small rich panel with the step, iteration, times, cost and the
agent's latest output, redrawn a few times a second; important events stay in the scrollback.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from sandbox_runner.agentclis.events import AssistantText, Result, ToolCall
from sandbox_runner.backends.api import Phase, Stream
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.output import PREFIX, closing_line, iteration_limit, plural
from sandbox_runner.console.units import usd

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from sandbox_runner.agentclis.events import Event
    from sandbox_runner.results.ended import IterationResult, StepOutcome

TAIL_LINES = 8
REFRESH_PER_SECOND = 4.0
# Bytes kept of one output line: plenty for a terminal row, and bounded however long the line is.
_LINE_BYTES = 4096
_ASSISTANT_LINES = 2
_CONTINUATION = " " * (len(PREFIX) + 3)


def clean_line(text: str) -> str:
    """What an output line says, without escape sequences or control characters."""
    return strip_escapes(text, keep="\t").expandtabs(4)


def _decode(raw: bytes) -> str:
    # A progress bar redraws its line with `\r`: a terminal would show only the last redraw.
    raw = raw.rstrip(b"\r")
    return clean_line(raw[raw.rfind(b"\r") + 1 :].decode("utf-8", "replace"))


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class LiveReporter:
    """Same events as `PlainReporter`, drawn as a live panel; call `close()` in a `finally`."""

    def __init__(
        self,
        *,
        out: IO[str] | None = None,
        console: Console | None = None,
        refresh_per_second: float = REFRESH_PER_SECOND,
    ) -> None:
        from rich.console import Console

        self._console = console or Console(file=out or sys.stdout, highlight=False)
        self._refresh_per_second = refresh_per_second
        self._live: Live | None = None
        self._closed = False
        # Output arrives on the main thread while rich redraws from its own thread.
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._step = ""
        self._agent = ""
        self._iteration = ""
        self._iteration_started: float | None = None
        self._iteration_ended: float | None = None
        self._cost = 0.0
        self._tail: deque[tuple[str, str]] = deque(maxlen=TAIL_LINES)
        self._partial: dict[Stream, bytes] = {"stdout": b"", "stderr": b""}

    # --- permanent lines ---------------------------------------------------------------------

    def _line(self, text: str, style: str = "") -> None:
        from rich.text import Text

        line = Text()
        line.append(f"{PREFIX} ", style="dim")
        # Lines after the first are indented: a message quoting agent text that holds a newline
        # cannot start a line of its own that reads like one of fks's.
        parts = [clean_line(part) for part in text.rstrip("\n").split("\n")]
        line.append(f"\n{_CONTINUATION}".join(parts), style=style)
        self._console.print(line, soft_wrap=True)

    def info(self, message: str) -> None:
        self._line(message)

    def warn(self, message: str) -> None:
        self._line(f"Warning: {message}", "yellow")

    # --- events ------------------------------------------------------------------------------

    def phase(self, phase: Phase) -> None:
        """The sandbox's phases are for --verbose (plain output); the panel shows the time."""

    def step_started(self, index: int, total: int, agent: str, iterations: int, loop: bool) -> None:
        with self._lock:
            self._step = f"Step {index}/{total}"
            self._agent = agent
            self._iteration = iteration_limit(iterations, loop)
            self._iteration_started = self._iteration_ended = None
            self._reset_output()
        if index > 1:
            self._console.print()
        self._line(
            f"Starting: {agent} (max {plural(iterations, 'iteration')})"
            if loop
            else f"Running: {agent}",
            "bold",
        )
        self._start()

    def iteration_started(self, number: int, maximum: int, loop: bool) -> None:
        with self._lock:
            self._iteration = f"iteration {number}/{maximum}" if loop else iteration_limit(1, loop)
            self._iteration_started = time.monotonic()
            self._iteration_ended = None
            self._reset_output()

    def output(self, stream: Stream, chunk: bytes) -> None:
        # Called for every chunk of a possibly very noisy agent: only the last few lines are
        # looked at, nothing is decoded beyond them, and nothing is drawn here.
        last = chunk.rfind(b"\n")
        with self._lock:
            if last < 0:
                partial = self._partial[stream]
                if len(partial) < _LINE_BYTES:
                    self._partial[stream] = partial + chunk[: _LINE_BYTES - len(partial)]
                return
            lines: list[bytes] = []
            end = last
            while len(lines) < TAIL_LINES:
                start = chunk.rfind(b"\n", 0, end) + 1
                if start == 0:
                    lines.append(
                        (self._partial[stream] + chunk[: min(end, _LINE_BYTES)])[:_LINE_BYTES]
                    )
                    break
                lines.append(chunk[start : min(end, start + _LINE_BYTES)])
                end = start - 1
            self._partial[stream] = chunk[last + 1 : last + 1 + _LINE_BYTES]
            style = "red" if stream == "stderr" else ""
            for raw in reversed(lines):
                text = _decode(raw)
                if text.strip():
                    self._tail.append((text, style))

    def events(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, ToolCall):
                with self._lock:
                    self._tail.append((f"› {clean_line(event.summary)}", "cyan"))
            elif isinstance(event, AssistantText):
                lines = [clean_line(line) for line in event.text.splitlines() if line.strip()]
                if len(lines) > _ASSISTANT_LINES:
                    lines = [*lines[: _ASSISTANT_LINES - 1], lines[_ASSISTANT_LINES - 1] + " …"]
                with self._lock:
                    self._tail.extend((line, "italic") for line in lines)
            elif isinstance(event, Result):
                with self._lock:
                    self._cost += event.cost_usd or 0.0
                    where = self._iteration if self._iteration.startswith("iteration") else ""
                self._line(
                    f"{where.capitalize()}: {event.summary_line()}"
                    if where
                    else event.summary_line()
                )

    def iteration_ended(self, result: IterationResult) -> None:
        with self._lock:
            self._iteration_ended = time.monotonic()
        if result.note:
            self._line(result.note, "yellow")

    def step_ended(self, agent: str, outcome: StepOutcome, loop: bool) -> None:
        if outcome.complete:
            failed = outcome.agent_failed() is not None
            self._line(outcome.end_line(agent, loop), "red" if failed else "green")
        else:
            self._line(f"Incomplete: {agent} {outcome.describe()}", "red")
            # The panel goes away; keep what the agent said last, it usually tells why.
            from rich.text import Text

            with self._lock:
                tail = self._tail_lines()
            for text, style in tail:
                self._console.print(
                    Text(f"    {text}", style=style or "dim", no_wrap=True, overflow="ellipsis")
                )

    def chain_ended(self, complete: bool, done: int, total: int, cost: float | None) -> None:
        self._stop()
        self._console.print()
        line = closing_line(complete, done, total, cost)
        self._line(line, "bold green" if complete else "bold red")

    def close(self) -> None:
        """Take the panel off the screen and give the terminal back; safe to call twice."""
        self._closed = True
        self._stop()

    # --- the panel ---------------------------------------------------------------------------

    def render(self) -> RenderableType:
        """The panel as it looks now."""
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        now = time.monotonic()
        with self._lock:
            header = Text(no_wrap=True, overflow="ellipsis")
            header.append(self._step or "Starting", style="bold")
            if self._agent:
                header.append(f"  {self._agent}", style="bold cyan")
            if self._iteration:
                header.append(f"  ·  {self._iteration}")
            if self._iteration_started is not None:
                header.append(
                    f" ({clock((self._iteration_ended or now) - self._iteration_started)})",
                    style="dim",
                )
            header.append(f"  ·  run {clock(now - self._started)}")
            if self._cost:
                header.append(f"  ·  {usd(self._cost)}", style="green")
            tail = self._tail_lines()
        lines = [Text(text, style=style, no_wrap=True, overflow="ellipsis") for text, style in tail]
        if not lines:
            lines = [Text("waiting for output…", style="dim")]
        panel = Panel(Group(header, *lines), border_style="dim", padding=(0, 1))
        # The cursor waits on an empty row below the panel: a `^C` the terminal echoes (or keys
        # typed meanwhile) land there and are wiped by the next redraw, instead of wrapping past
        # a full-width border and shifting every later redraw down a row.
        return Group(panel, Text(""))

    def _tail_lines(self) -> list[tuple[str, str]]:
        """The last lines of output, the unfinished ones included (call with the lock held)."""
        lines = list(self._tail)
        for stream, partial in self._partial.items():
            text = _decode(partial) if partial else ""
            if text.strip():
                lines.append((text, "red" if stream == "stderr" else ""))
        return lines[-TAIL_LINES:]

    def _reset_output(self) -> None:
        self._tail.clear()
        self._partial = {"stdout": b"", "stderr": b""}

    def _start(self) -> None:
        if self._live is not None or self._closed:
            return
        from rich.live import Live

        live = Live(
            get_renderable=self.render,
            console=self._console,
            refresh_per_second=self._refresh_per_second,
            transient=True,
            # Stray prints to a terminal go above the panel instead of through it; a piped
            # stdout (the report under --json) is left alone.
            redirect_stdout=_isatty(sys.stdout),
            redirect_stderr=_isatty(sys.stderr),
        )
        self._live = live
        live.start(refresh=True)

    def _stop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()


def _isatty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # closed
        return False
