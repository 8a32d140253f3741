"""Every request an iteration made through the egress proxy, counted in bounded memory between
takes from the access log's lines: per kind of request (destination, method, status, result,
secret) and, for the allow-list's refusals, per destination. An agent can make any number of
requests to any number of hosts: the kinds counted and the rows listed are bounded."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sandbox_runner.backends.docker.egress.access_log import AccessLine, Key
from sandbox_runner.backends.docker.egress.refusals import Refusals
from sandbox_runner.results.reported import NetworkRecord, RequestsRecord

NETWORK_LISTED = 50  # kinds of request listed per take, the most made first; the rest summed up
COUNTED = 1000  # kinds of request (and refused destinations) counted between takes


@dataclass
class _Sums:
    count: int = 0
    sent: int = 0
    received: int = 0

    def add(self, count: int, sent: int, received: int) -> None:
        self.count += count
        self.sent += sent
        self.received += received


@dataclass(frozen=True)
class Traffic:
    """What went through the proxy between two takes."""

    refusals: Refusals = field(default_factory=Refusals)
    network: NetworkRecord = field(default_factory=NetworkRecord)


@dataclass
class TrafficCounter:
    """The requests of the access log's lines, counted per kind and (refusals) per destination
    for up to COUNTED of each between takes; beyond them, summed up. Not thread-safe."""

    _kinds: dict[Key, _Sums] = field(default_factory=dict)
    _more: _Sums = field(default_factory=_Sums)
    _denied: Counter[tuple[str, int | None]] = field(default_factory=Counter)
    _denied_more: int = 0

    def add(self, line: AccessLine) -> None:
        key = line.key
        sums = self._kinds.get(key)
        if sums is None and len(self._kinds) < COUNTED:
            sums = self._kinds[key] = _Sums()
        (self._more if sums is None else sums).add(1, line.sent, line.received)
        if line.refused:
            where = (line.host, line.port)
            if where in self._denied or len(self._denied) < COUNTED:
                self._denied[where] += 1
            else:
                self._denied_more += 1

    def take(self) -> Traffic:
        """What was counted since the last take (or the start); the counts start again."""
        kinds, more = self._kinds, self._more
        denied, denied_more = self._denied, self._denied_more
        self._kinds, self._more, self._denied, self._denied_more = {}, _Sums(), Counter(), 0
        return Traffic(Refusals.of(denied, denied_more), _listed(kinds, more))


def merged(first: NetworkRecord, second: NetworkRecord) -> NetworkRecord:
    """Both together, listed as one take would list them."""
    kinds: dict[Key, _Sums] = {}
    for row in (*first.requests, *second.requests):
        key = (row.host, row.port, row.method, row.status, row.result, row.secret)
        kinds.setdefault(key, _Sums()).add(row.count, row.sent, row.received)
    more = _Sums()
    for part in (first, second):
        more.add(part.more, part.more_sent, part.more_received)
    return _listed(kinds, more)


def _listed(kinds: dict[Key, _Sums], more: _Sums) -> NetworkRecord:
    """The NETWORK_LISTED kinds made most (then most bytes), the rest summed into `more`."""
    ordered = sorted(
        kinds.items(),
        key=lambda item: (-item[1].count, -(item[1].sent + item[1].received), repr(item[0])),
    )
    for _, sums in ordered[NETWORK_LISTED:]:
        more.add(sums.count, sums.sent, sums.received)
    rows = [
        RequestsRecord(
            host=host,
            port=port,
            method=method,
            status=status,
            result=result,
            secret=secret,
            count=sums.count,
            sent=sums.sent,
            received=sums.received,
        )
        for (host, port, method, status, result, secret), sums in ordered[:NETWORK_LISTED]
    ]
    return NetworkRecord(
        requests=rows, more=more.count, more_sent=more.sent, more_received=more.received
    )
