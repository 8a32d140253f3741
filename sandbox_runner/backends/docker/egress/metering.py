"""The host's side of the egress proxy's meter (`meter.py`): its config (routes to the model
APIs, the price table), the budget an iteration opens, and the meter's lines on the proxy's
output, read bounded and checked (the agent chooses model names; a line of the wrong form is
ignored, a number out of reason is none)."""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from sandbox_runner.agentclis.pricing import CACHE_PRICES, PRICES

if TYPE_CHECKING:
    from sandbox_runner.backends.docker.egress.upstream import ApiUpstream

LINE_PREFIX = "fks-meter "  # as meter.LINE_PREFIX (meter.py imports nothing of fks's)
METER_PORT = 3130
"""On 127.0.0.1 in the proxy's container: the meter, Squid's accelerators' peer."""
METER_SCRIPT = "/etc/fks-meter.py"
METER_CONFIG = "/etc/fks-meter.json"
METER_BUDGET = "/etc/fks-meter-budget.json"
SPEND_LIMIT = 1e6
"""Dollars a meter line's figure is taken as at most (more is past any budget anyway)."""
_KEPT = 64  # iterations whose spend is kept


def meter_files(
    apis: Sequence[ApiUpstream], prices: Sequence[Sequence[Any]] = ()
) -> dict[str, str]:
    """The meter's script and config for a proxy with `apis`: path -> text. `prices`:
    (family, input, output) rows that come before the built-in table."""
    routes = {}
    for api in apis:
        default_port = 443 if api.tls else 80
        site = api.host if api.port == default_port else f"{api.host}:{api.port}"
        routes[site] = ["https" if api.tls else "http", api.host, api.port]
    table = [list(row) for row in (*prices, *PRICES)]
    config = {"routes": routes, "prices": table, "cache": list(CACHE_PRICES)}
    script = resources.files("sandbox_runner.backends.docker.egress").joinpath("meter.py")
    return {METER_SCRIPT: script.read_text(), METER_CONFIG: json.dumps(config)}


def budget_text(iteration: int, left: float | None) -> str:
    """The budget file: the iteration's number and what it may spend (None: no limit)."""
    return json.dumps([iteration, None if left is None else max(0.0, left)])


@dataclass(frozen=True)
class Metered:
    """What the meter saw of one iteration."""

    spent: float = 0.0
    refused: bool = False
    """A request was refused for the budget."""


def meter_line(line: str) -> tuple[int, float, bool] | None:
    """(iteration, spent, refused) of a meter line; None for any other line."""
    if not line.startswith(LINE_PREFIX) or len(line) > 4096:
        return None
    try:
        fields = json.loads(line[len(LINE_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    number, spent = fields.get("iteration"), fields.get("spent")
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < 2**31:
        return None
    if isinstance(spent, bool) or not isinstance(spent, int | float):
        return None
    if not math.isfinite(spent) or spent < 0:
        return None
    return number, min(float(spent), SPEND_LIMIT), fields.get("refused") is True


class Spends:
    """The meter's figures by iteration, in bounded memory; `on_refused` is called (from the
    log's thread) when a request of the iteration being watched was refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[int, Metered] = OrderedDict()
        self._watch: tuple[int, Callable[[], None]] | None = None

    def take_line(self, line: str) -> None:
        found = meter_line(line)
        if found is None:
            return
        number, spent, refused = found
        with self._lock:
            before = self._seen.pop(number, Metered())
            now = Metered(max(before.spent, spent), before.refused or refused)
            self._seen[number] = now
            while len(self._seen) > _KEPT:
                self._seen.popitem(last=False)
            watch = self._watch
        if refused and watch is not None and watch[0] == number:
            watch[1]()

    def of(self, number: int) -> Metered:
        with self._lock:
            return self._seen.get(number, Metered())

    def watch(self, number: int, on_refused: Callable[[], None] | None) -> None:
        with self._lock:
            self._watch = None if on_refused is None else (number, on_refused)
