"""Allow-list entries for a sandbox's egress proxy (`sandbox.allow`, `--allow`): `host` or
`host:port`, parsed and checked before anything is started.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sandbox_runner.errors import FksError

_DEFAULT_PORTS = (80, 443)
_LABEL_RE = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_IPV4_RE = re.compile(r"[0-9.]+")


class AllowEntryError(FksError, ValueError):
    """An allow-list entry that is not `host` or `host:port` (a ValueError for pydantic)."""


@dataclass(frozen=True)
class AllowEntry:
    """A host the agent may reach through the proxy: a DNS name or an IPv4 address, on one
    port or (`port` None) on 80 and 443. Names match exactly: no subdomains, no wildcards."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> AllowEntry:
        """`host` or `host:port`; AllowEntryError naming the entry and the fix otherwise."""
        entry = text.strip()
        if "://" in entry or "/" in entry:
            raise AllowEntryError(f"allow-list entry {text!r}: give host or host:port, not a URL")
        if entry.startswith("[") or entry.count(":") > 1:
            raise AllowEntryError(f"allow-list entry {text!r}: IPv6 addresses are not supported")
        host, sep, port_text = entry.partition(":")
        port = _parse_port(port_text, text) if sep else None
        return cls(parse_host(host, text), port)

    @property
    def ports(self) -> tuple[int, ...]:
        return _DEFAULT_PORTS if self.port is None else (self.port,)

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


def _parse_port(text: str, entry: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AllowEntryError(f"allow-list entry {entry!r}: the port must be 1-65535")
    return int(text)


def parse_host(text: str, entry: str) -> str:
    """`text` as a lower-case DNS name or IPv4 address; AllowEntryError naming `entry` if not."""
    host = text.lower().removesuffix(".")
    if _IPV4_RE.fullmatch(host):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise AllowEntryError(f"allow-list entry {entry!r}: not an IPv4 address") from None
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL_RE.fullmatch(label) for label in labels):
        raise AllowEntryError(
            f"allow-list entry {entry!r}: not a host name (letters, digits, '-' and '.'), "
            "an IPv4 address, or either with ':port'"
        )
    return host
