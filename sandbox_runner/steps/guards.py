"""What stops an iteration from outside the agent: the cost budget (passed to Claude as
`--max-budget-usd` and checked against the running cost its stream reports) and the stall
watch (no output for too long).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import IterationEnd
from sandbox_runner.results.ended import usd_limit

DEFAULT_STALL_TIMEOUT = 1200.0
"""Seconds without output before an iteration counts as stalled and is killed (20 minutes:
longer than Claude's longest tool call, 10 minutes)."""
_SEEN_MESSAGES = 256
# USD per million tokens (input, output): the lowest price of each family, so the estimate
# from the stream stays at or below what Claude reports (its output counts arrive late, too).
_PRICES = (
    ("claude-3-haiku", 0.25, 1.25),
    ("haiku", 0.8, 4.0),
    ("sonnet", 3.0, 15.0),
    ("opus", 5.0, 25.0),
)
_CACHE_WRITE, _CACHE_READ = 1.25, 0.1

Stop = Literal[IterationEnd.BUDGET, IterationEnd.STALLED]
"""Why fks stopped an iteration from outside: the budget, or a stall."""


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


class RunningCost:
    """A lower bound of what a Claude iteration has spent so far, from the usage of the
    assistant messages in its stream (each message counted once, however many events carry it).
    """

    def __init__(self) -> None:
        self.usd = 0.0
        self._seen: OrderedDict[str, float] = OrderedDict()

    def message(self, message: dict[str, Any]) -> None:
        usage = message.get("usage")
        ident = message.get("id")
        if not isinstance(usage, dict) or not isinstance(ident, str):
            return
        cost = _estimate(str(message.get("model") or ""), usage)
        previous = self._seen.pop(ident, 0.0)
        self._seen[ident] = max(previous, cost)
        self.usd += self._seen[ident] - previous
        while len(self._seen) > _SEEN_MESSAGES:
            self._seen.popitem(last=False)


def _estimate(model: str, usage: dict[str, Any]) -> float:
    name = model.lower()
    prices = next(((i, o) for family, i, o in _PRICES if family in name), None)
    if prices is None:
        return 0.0
    price_in, price_out = prices
    tokens = {key: _count(usage.get(key)) for key in _USAGE_KEYS}
    cost = (
        tokens["input_tokens"] * price_in
        + tokens["cache_creation_input_tokens"] * price_in * _CACHE_WRITE
        + tokens["cache_read_input_tokens"] * price_in * _CACHE_READ
        + tokens["output_tokens"] * price_out
    )
    return cost / 1_000_000


_USAGE_KEYS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, min(int(value), 10**9))


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
    ) -> None:
        self._execution = execution
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

    def output(self, running_cost: float | None) -> None:
        """Output arrived; `running_cost` is what the stream says was spent so far."""
        self._last = time.monotonic()
        budget = self._budget
        if budget is not None and running_cost is not None and running_cost >= budget.left:
            self._stop(IterationEnd.BUDGET)

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
