"""What stops an iteration from outside the agent: the cost budget (passed to Claude as
`--max-budget-usd` and checked against the running cost its stream reports), the turn limit of
a CLI that has none of its own (counted in its stream) and the stall watch (no output for too
long).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import IterationEnd
from sandbox_runner.results.ended import usd_limit

DEFAULT_STALL_TIMEOUT = 1200.0
"""Seconds without output before an iteration counts as stalled and is killed (20 minutes:
longer than Claude's longest tool call, 10 minutes)."""
Stop = Literal[
    IterationEnd.BUDGET, IterationEnd.STALLED, IterationEnd.MAX_TURNS, IterationEnd.API_UNREACHABLE
]
"""Why fks stopped an iteration from outside: the budget, a stall, the turn limit, or a CLI
waiting without end for an API it cannot reach."""


@dataclass(frozen=True)
class Budget:
    """What a step may still spend: `limit` (named by `option`) less what was `spent` before."""

    limit: float
    spent: float
    option: str = "--max-cost"

    @property
    def left(self) -> float:
        return self.limit - self.spent

    def claude_flag(self) -> list[str]:
        """`--max-budget-usd` with what is left, rounded down to a hundredth of a cent."""
        left = max(math.floor(self.left * 10_000) / 10_000, 0.0001)
        return ["--max-budget-usd", f"{left:.4f}"]

    def stopped(self, spent: float) -> str:
        """`Stopped: spent $0.0612 of --max-cost $0.05`."""
        return f"Stopped: spent {usd(spent)} of {self.option} {usd_limit(self.limit)}"


class Killable(Protocol):
    def kill(self) -> None: ...


class Guard:
    """Watches one running iteration; kills it when the budget is crossed or it stalls.

    `output()` after every chunk; the stall watch runs in a thread of its own, since a silent
    agent gives the reading thread nothing to act on.
    """

    def __init__(
        self,
        execution: Killable,
        *,
        budget: Budget | None,
        stall_after: float | None,
        max_turns: int | None = None,
    ) -> None:
        self._execution = execution
        self._max_turns = max_turns
        self._budget = budget
        self._stall_after = stall_after
        self.stopped: Stop | None = None
        self._last = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Guard:
        if self._stall_after:
            self._thread = threading.Thread(target=self._watch, name="fks-stall", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def output(self, running_cost: float | None, turns: int = 0, unreachable: bool = False) -> None:
        """Output arrived; `running_cost` is what the stream says was spent so far, `turns`
        the turns it shows begun (checked against `max_turns`, when fks holds the limit),
        `unreachable` whether the CLI waits without end for an API it cannot reach."""
        self._last = time.monotonic()
        budget = self._budget
        if budget is not None and running_cost is not None and running_cost >= budget.left:
            self._stop(IterationEnd.BUDGET)
        elif self._max_turns is not None and turns > self._max_turns:
            self._stop(IterationEnd.MAX_TURNS)
        elif unreachable:
            self._stop(IterationEnd.API_UNREACHABLE)

    def ended(self, metered: float | None) -> None:
        """The iteration ended; `metered` is what a meter outside it counted (it stopped the
        agent itself when the budget was reached): the budget's end if that reached it."""
        budget = self._budget
        if budget is not None and metered is not None and metered >= budget.left:
            with self._lock:
                self.stopped = self.stopped or IterationEnd.BUDGET

    def _watch(self) -> None:
        assert self._stall_after is not None
        while not self._done.wait(max(0.05, self._last + self._stall_after - time.monotonic())):
            if time.monotonic() - self._last >= self._stall_after:
                self._stop(IterationEnd.STALLED)
                return

    def _stop(self, why: Stop) -> None:
        with self._lock:
            if self.stopped is not None:
                return
            self.stopped = why
        self._execution.kill()
