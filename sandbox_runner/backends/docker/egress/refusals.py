"""What the egress proxy refused: Squid's TCP_DENIED lines of the forward port, per
destination, the most refused first; a take lists at most DENIED_LISTED destinations and sums
up the rest (an agent can ask for any number of hosts; the user gets a bounded list)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sandbox_runner.backends.docker.egress.access_log import access_line
from sandbox_runner.plan.allow import AllowEntry, AllowEntryError
from sandbox_runner.results.reported import DeniedRecord

DENIED_LISTED = 20  # destinations listed per take, the most refused first; the rest summed up


@dataclass(frozen=True)
class Denied:
    """Requests the allow-list refused, per destination (`port` None when Squid logged none)."""

    host: str
    port: int | None
    count: int


@dataclass(frozen=True)
class Refusals:
    """What the allow-list refused since the last take: at most DENIED_LISTED destinations,
    the most refused first, and how many requests went to others (an agent can ask for
    any number of hosts; the user gets a bounded list)."""

    listed: tuple[Denied, ...] = ()
    more: int = 0
    """Requests to destinations not listed."""

    @classmethod
    def of(cls, counts: Counter[tuple[str, int | None]], more: int = 0) -> Refusals:
        """Counts per (host, port), listed: the DENIED_LISTED most refused, the rest summed."""
        ordered = _most_refused(counts)
        rest = sum(d.count for d in ordered[DENIED_LISTED:])
        return cls(tuple(ordered[:DENIED_LISTED]), more + rest)

    def plus(self, other: Refusals) -> Refusals:
        """Both together, listed as one take would list them."""
        counts: Counter[tuple[str, int | None]] = Counter()
        for d in (*self.listed, *other.listed):
            counts[(d.host, d.port)] += d.count
        return Refusals.of(counts, self.more + other.more)


def parse_denied(log: str, *, since: float | None = None) -> list[Denied]:
    """TCP_DENIED lines of the forward port in an access log written with logformat `fks`,
    per destination, the most refused first."""
    counts: Counter[tuple[str, int | None]] = Counter()
    for line in log.splitlines():
        found = denied_line(line)
        if found is not None and (since is None or found[0] >= since):
            counts[found[1]] += 1
    return _most_refused(counts)


def denied_line(line: str) -> tuple[float, tuple[str, int | None]] | None:
    """(time, (host, port)) of a TCP_DENIED line of the forward port; None for any other."""
    found = access_line(line)
    if found is None or not found.refused:
        return None
    return found.when, (found.host, found.port)


def _most_refused(counts: Counter[tuple[str, int | None]]) -> list[Denied]:
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1] or 0))
    return [Denied(host, port, count) for (host, port), count in ordered]


def refused_warning(host: str, port: int | None, count: int) -> str:
    """The line saying that requests to `host`:`port` were refused, with the `--allow` that
    would let them through. The agent chose the host and Squid logs more than host names: one
    that is not a single destination `--allow` takes (a name, an IPv4 address) is shown quoted,
    every character that is not printable ASCII escaped, and no option is offered to copy."""
    allow = _allow_entry(host, port)
    shown = host if allow is not None else ascii(host)
    line = f"{DeniedRecord(host=shown, port=port, count=count).describe()} "
    line += "was denied" if count == 1 else "were denied"
    return (
        f"{line}; allow with --allow {allow}"
        if allow
        else f"{line} (not a host name --allow takes)"
    )


def _allow_entry(host: str, port: int | None) -> str | None:
    """The `--allow` entry of exactly this destination (None: there is none)."""
    text = host if port in (None, 80, 443) else f"{host}:{port}"
    try:
        entry = AllowEntry.parse(text)
    except AllowEntryError:
        return None
    plain = host.isascii() and host.strip() == host  # as parsed: not lower-cased into one
    return str(entry) if plain and not entry.wildcard else None
