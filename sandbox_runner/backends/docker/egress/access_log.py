"""Squid's access log (logformat `fks`) read line by line (`read_lines`, every proxy's one
reader): one request per line, every field bounded and checked for its form (an agent chooses
host names and methods; a field of the wrong form is None or 0, never an error)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from sandbox_runner.backends.docker.egress.squid import FORWARD_PORT
from sandbox_runner.backends.docker.egress.upstream import API_KINDS

MODEL_API = "model API"
"""The secret of the model API's calls (the proxy adds its credential to them)."""
SECRET_TUNNEL = "SECRET_TUNNEL"
"""The result of a CONNECT to a secret's destination: the proxy ended its TLS to add the secret
to the requests inside (each logged on its own line). Squid logs such a CONNECT as NONE_NONE
with 200 (every other allowed CONNECT is a TCP_TUNNEL, passed through untouched)."""
TEXT_LIMIT = 253  # characters kept of a host or a secret's destination (a DNS name's most)
_WORD_LIMIT = 40  # characters kept of a method or Squid's result
_NUMBER_DIGITS = 18  # digits of a byte count read at most (more is not a Squid number)
_API_CALLS = {
    api.port: frozenset(method for _, method, _ in api.calls) for api in API_KINDS.values()
}
LINE_LIMIT = 64 * 1024
"""Bytes of one log line read at most (Squid's are far shorter)."""

Key = tuple[str, int | None, str, int | None, str, str | None]
"""What makes requests of one kind: host, port, method, HTTP status, Squid's result, secret."""


@dataclass(frozen=True)
class AccessLine:
    """One request as Squid logged it, every field bounded (None: not of its form)."""

    when: float
    result: str
    """Squid's result: TCP_TUNNEL, TCP_MISS, TCP_DENIED, NONE_NONE, …, or SECRET_TUNNEL."""
    status: int | None
    """The HTTP status the agent got (None: none, Squid's 000)."""
    method: str
    host: str
    port: int | None
    local_port: int | None
    """FORWARD_PORT: the agent's proxy; an API kind's port: that model API."""
    sent: int
    """Bytes from the agent."""
    received: int
    """Bytes to the agent."""
    secret: str | None
    """The destination whose secret the proxy added (MODEL_API: the model API's credential)."""

    @property
    def key(self) -> Key:
        return (self.host, self.port, self.method, self.status, self.result, self.secret)

    @property
    def refused(self) -> bool:
        """Refused by the allow-list (TCP_DENIED, or TCP_DENIED_ABORTED when the agent did not
        wait for the answer); a refusal of the API port is not one: fks's own rule."""
        return _denied(self.result) and self.local_port == FORWARD_PORT


def read_lines(stream: Iterable[bytes], take: Callable[[str], None]) -> None:
    """Each line of `stream` (the proxy's output in chunks, as they come) to `take`, decoded,
    every line cut at LINE_LIMIT bytes: an agent chooses the host names Squid logs."""
    pending = b""
    for chunk in stream:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        pending = pending[-LINE_LIMIT:]
        for raw in lines:
            take(raw[:LINE_LIMIT].decode(errors="replace"))


def access_line(line: str) -> AccessLine | None:
    """The request of a line of the access log; None for any other line. Lines of 9 fields or
    more (a host Squid logged with spaces is joined up), and those of 6 (the format before
    bytes and secrets were logged)."""
    fields = line.split()
    if len(fields) == 6:
        fields += ["-", "-", "-"]
    if len(fields) < 9 or "/" not in fields[1]:
        return None
    try:
        when = float(fields[0])
    except ValueError:
        return None
    if not math.isfinite(when):
        return None
    result, _, status = fields[1].partition("/")
    method, host = _bounded(fields[2], _WORD_LIMIT), _bounded(" ".join(fields[3:-5]), TEXT_LIMIT)
    port, local_port, sent, received, note = fields[-5:]
    parsed = AccessLine(
        when=when,
        result=_bounded(result, _WORD_LIMIT),
        status=_number(status, 3) or None,
        method=method,
        host=host,
        port=_port(port),
        local_port=_port(local_port),
        sent=_number(sent, _NUMBER_DIGITS) or 0,
        received=_number(received, _NUMBER_DIGITS) or 0,
        # Squid notes a request before it checks access: a refused one carried no secret.
        secret=None if note == "-" or _denied(result) else _bounded(note, TEXT_LIMIT),
    )
    if parsed.result == "NONE_NONE" and parsed.method == "-" and parsed.sent == 0:
        return None  # a connection that sent nothing (the forwarder's readiness probe): no request
    if parsed.secret is None and _api_call(parsed):
        parsed = replace(parsed, secret=MODEL_API)
    if _opened_for_a_secret(parsed):
        parsed = replace(parsed, result=SECRET_TUNNEL)
    return parsed


def _opened_for_a_secret(line: AccessLine) -> bool:
    """A CONNECT the proxy answered itself, to end its TLS: only a secret's destination is
    (every other is spliced before a byte is read)."""
    return (
        line.method == "CONNECT"
        and line.result in ("NONE", "NONE_NONE")
        and line.status == 200
        and line.local_port == FORWARD_PORT
    )


def _api_call(line: AccessLine) -> bool:
    """A call the API port let through: the proxy added the credential (its warm-up HEAD and
    what it refuses get none)."""
    methods = _API_CALLS.get(line.local_port or 0, frozenset())
    return not _denied(line.result) and line.method in methods


def _denied(result: str) -> bool:
    return result == "TCP_DENIED" or result.startswith("TCP_DENIED_")


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _number(text: str, digits: int) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None


def _port(text: str) -> int | None:
    port = _number(text, 5)
    return port if port is not None and 0 < port < 65536 else None
