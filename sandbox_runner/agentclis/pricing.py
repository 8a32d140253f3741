"""What model requests cost, estimated from their usage: prices per model family, and the
running cost of a Claude iteration from the usage of the messages in its stream.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

_SEEN_MESSAGES = 256
# USD per million tokens (input, output): the lowest price of each family, so the estimate
# from the stream stays at or below what the CLI reports (Claude's output counts arrive late).
_PRICES = (
    ("claude-3-haiku", 0.25, 1.25),
    ("haiku", 0.8, 4.0),
    ("sonnet", 3.0, 15.0),
    ("opus", 5.0, 25.0),
    ("gpt-5-nano", 0.05, 0.4),
    ("gpt-5-mini", 0.25, 2.0),
    ("gpt-5", 1.25, 10.0),
    ("gpt-4.1-mini", 0.4, 1.6),
    ("gpt-4.1", 2.0, 8.0),
    ("o4-mini", 1.1, 4.4),
    ("o3", 2.0, 8.0),
    ("gemini-2.5-flash-lite", 0.1, 0.4),
    ("gemini-2.5-flash", 0.3, 2.5),
    ("gemini-2.5-pro", 1.25, 10.0),
)
_CACHE_WRITE, _CACHE_READ = 1.25, 0.1
PRICES = _PRICES
"""(family, input, output) USD per million tokens: the first family a model's name contains."""
CACHE_PRICES = (_CACHE_WRITE, _CACHE_READ)
"""Cache writes and reads, as fractions of the input price."""


def estimate(model: str, input_tokens: int, output_tokens: int, cached: int = 0) -> float | None:
    """The cost of a request to `model` (None: a model of no family priced here); `cached`
    input tokens count at the cache-read price."""
    prices = _prices(model)
    if prices is None:
        return None
    price_in, price_out = prices
    fresh = max(0, input_tokens - cached)
    cost = fresh * price_in + cached * price_in * _CACHE_READ + output_tokens * price_out
    return cost / 1_000_000


def charged(model: str, input_tokens: int, output_tokens: int, cached: int = 0) -> float | None:
    """What an agent CLI other than Claude (which reports its own cost) spent: `estimate`,
    or for a model named but of no family the dearest price here, as the egress proxy's
    meter prices it: no model name leaves a budget unchecked. None: no model named (a
    transcript read again without its agent's settings)."""
    found = estimate(model, input_tokens, output_tokens, cached)
    if found is not None or not model:
        return found
    price_in, price_out = max(i for _, i, _ in _PRICES), max(o for _, _, o in _PRICES)
    fresh = max(0, input_tokens - cached)
    cost = fresh * price_in + cached * price_in * _CACHE_READ + output_tokens * price_out
    return cost / 1_000_000


def _prices(model: str) -> tuple[float, float] | None:
    name = model.lower()
    return next(((i, o) for family, i, o in _PRICES if family in name), None)


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
    prices = _prices(model)
    if prices is None:
        return 0.0
    price_in, price_out = prices
    tokens = {key: count(usage.get(key)) for key in _USAGE_KEYS}
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


def count(value: Any) -> int:
    """A token count as reported: a finite, non-negative number within reason (else 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0  # an int of any size is finite: isfinite would overflow on a huge one
    return max(0, min(int(value), 10**9))
