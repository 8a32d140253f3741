"""What `fks forge run` shows of its workers. Plain lines, each task's prefixed with its id
(stderr under --json); on a terminal an overall line (tasks done of all, in flight, landed,
cost, time), then one line per task in flight (its id, stage, time and latest output), redrawn
a few times a second, while stage changes and results stay in the scrollback. At any width the
id, stage and time are shown whole: only the output line gives way."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.live import REFRESH_PER_SECOND, clean_line, clock
from sandbox_runner.console.output import plural
from sandbox_runner.console.units import usd
from sandbox_runner.errors import FksError

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from sandbox_runner.forge.scheduler import ForgeView, Worker

_KEPT = (
    "[fks] Stage: ",
    "[fks] Landed",
    "[fks] Failed",
    "[fks] Waiting",
    "[fks] Warning",
    "[fks] Needs",
    "[fks] Back to",
)
_COST_EVERY = 2.0
"""Seconds between reads of the spent amount (it is read from the work items' files)."""
_SHOWN_STAGE = 24
_SHOWN_ID = 32
_TAB = "\t"


def forge_view(out: IO[str], *, total: int, spent: Callable[[], float]) -> ForgeView:
    """The live view on a terminal (not TERM=dumb), else plain lines."""
    if out.isatty() and os.environ.get("TERM") != "dumb":
        return LiveForgeView(out, total=total, spent=spent)
    return PlainForgeView(out)


class PlainForgeView:
    """Each line as it comes, escape sequences stripped (tabs kept)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def line(self, task_id: str, text: str) -> None:
        print(f"[{task_id}] {strip_escapes(text, keep=_TAB)}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(f"[fks] {strip_escapes(text, keep=_TAB)}", file=self.out, flush=True)

    def tick(self, workers: Sequence[Worker]) -> None:
        """Plain lines have nothing to redraw."""

    def close(self) -> None:
        """Nothing to stop."""


class LiveForgeView(PlainForgeView):
    """The conductor's view drawn with rich; `close()` ends it.

    `total`: the tasks of this run; `spent`: what they have cost so far (USD).
    """

    def __init__(
        self,
        out: IO[str],
        *,
        console: Console | None = None,
        total: int = 0,
        spent: Callable[[], float] | None = None,
    ) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(out)
        self._console = console or Console(file=out, highlight=False)
        self._workers: list[Worker] = []
        self._total = total
        self._spent = spent
        self._cost = 0.0
        self._cost_read = -_COST_EVERY
        self._seen: set[str] = set()
        self._landed: set[str] = set()
        self._began = time.monotonic()
        self._live: Live = Live(
            self.render(),
            console=self._console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,
        )
        self._live.start()

    def line(self, task_id: str, text: str) -> None:
        if text.startswith("[fks] Landed"):
            self._landed.add(task_id)
        if text.startswith(_KEPT):
            self._console.print(f"[{task_id}] {clean_line(text)}", markup=False)

    def note(self, text: str) -> None:
        self._console.print(f"[fks] {clean_line(text)}", markup=False)

    def tick(self, workers: Sequence[Worker]) -> None:
        before = self._seen - {w.task_id for w in self._workers}
        self._workers = list(workers)
        self._seen.update(w.task_id for w in workers)
        if self._seen - {w.task_id for w in workers} != before:
            self._cost_read = -_COST_EVERY  # a task ended: its cost is final, read it now
        self._live.update(self.render())

    def overall(self) -> str:
        """`2/5 tasks done, 2 in flight, 1 landed · $0.1234 · 3:05`."""
        now = time.monotonic()
        if self._spent is not None and now - self._cost_read >= _COST_EVERY:
            self._cost_read = now
            with contextlib.suppress(FksError):  # a work item being rewritten: next time
                self._cost = self._spent()
        in_flight = {w.task_id for w in self._workers}
        done = len(self._seen - in_flight)
        total = max(self._total, len(self._seen))
        return (
            f"{done}/{plural(total, 'task')} done, {len(in_flight)} in flight, "
            f"{len(self._landed)} landed · {usd(self._cost)} · {clock(now - self._began)}"
        )

    def render(self) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic()
        rows = [
            (
                _cut(clean_line(w.task_id), _SHOWN_ID),
                _cut(clean_line(w.stage), _SHOWN_STAGE),
                clock(now - w.started),
                clean_line(w.last),
            )
            for w in self._workers
        ]
        table = Table.grid(padding=(0, 1))
        for i in range(3):  # shown whole: the output column alone gives way
            widest = max((len(r[i]) for r in rows), default=0)
            table.add_column(no_wrap=True, min_width=widest, max_width=widest or None)
        fixed = sum(max((len(r[i]) for r in rows), default=0) + 1 for i in range(3))
        room = max(0, self._console.width - fixed)
        table.add_column(no_wrap=True, overflow="ellipsis", max_width=room or None)
        for task_id, stage, elapsed, last in rows:
            table.add_row(task_id, stage, elapsed, _cut(last, room))
        if not rows:
            table.add_row("(no task in flight)")
        return Group(Text(self.overall(), no_wrap=True, overflow="ellipsis"), table)

    def close(self) -> None:
        self._live.stop()


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
