"""`fks forge run` on a terminal: one line per task in flight (its stage, time and latest
output), redrawn a few times a second; stage changes and results stay in the scrollback."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from sandbox_runner.forge.scheduler import ForgeView, Worker
from sandbox_runner.ui.live import REFRESH_PER_SECOND, clean_line, clock

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

_KEPT = ("[fks] Stage: ", "[fks] Landed", "[fks] Warning", "[fks] Needs", "[fks] Back to")


class LiveForgeView(ForgeView):
    """The conductor's view drawn with rich; `close()` ends it."""

    def __init__(self, out: IO[str], *, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(out)
        self._console = console or Console(file=out, highlight=False)
        self._workers: list[Worker] = []
        self._live: Live = Live(
            self.render(),
            console=self._console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,
        )
        self._live.start()

    def line(self, task_id: str, text: str) -> None:
        if text.startswith(_KEPT):
            self._console.print(f"[{task_id}] {clean_line(text)}", markup=False)

    def note(self, text: str) -> None:
        self._console.print(f"[fks] {clean_line(text)}", markup=False)

    def tick(self, workers: Sequence[Worker]) -> None:
        self._workers = list(workers)
        self._live.update(self.render())

    def render(self) -> RenderableType:
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        for ratio in (None, None, None, 1):
            table.add_column(no_wrap=True, overflow="ellipsis", ratio=ratio)
        now = time.monotonic()
        for worker in self._workers:
            table.add_row(
                worker.task_id,
                worker.stage,
                clock(now - worker.started),
                clean_line(worker.last)[:200],
            )
        if not self._workers:
            table.add_row("(no task in flight)")
        return table

    def close(self) -> None:
        self._live.stop()
