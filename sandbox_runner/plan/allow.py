"""Destinations for a sandbox's egress proxy (`sandbox.allow`, `sandbox.deny`, `--allow`, a
secret's `host`): `host`, `host:port`, `*.domain` or `*.domain:port`, parsed and checked before
anything is started.
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


WILDCARD = "*."


@dataclass(frozen=True)
class AllowEntry:
    """A destination: a DNS name or an IPv4 address, on one port or (`port` None) on 80 and
    443. A name matches exactly; `*.domain` matches names with one label or more before
    `.domain`, never `domain` itself."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> AllowEntry:
        """`host`, `host:port`, `*.domain` or `*.domain:port`; AllowEntryError naming the entry
        and the fix otherwise."""
        entry = text.strip()
        if "://" in entry or "/" in entry:
            raise AllowEntryError(f"allow-list entry {text!r}: give host or host:port, not a URL")
        if entry.startswith("[") or entry.count(":") > 1:
            raise AllowEntryError(f"allow-list entry {text!r}: IPv6 addresses are not supported")
        host, sep, port_text = entry.partition(":")
        port = _parse_port(port_text, text) if sep else None
        if host.startswith(WILDCARD):
            return cls(WILDCARD + _parse_domain(host.removeprefix(WILDCARD), text), port)
        if "*" in host:
            raise AllowEntryError(
                f"allow-list entry {text!r}: a wildcard is '*.' before a domain "
                "(*.example.com), never alone or inside a name"
            )
        return cls(parse_host(host, text), port)

    @property
    def ports(self) -> tuple[int, ...]:
        return _DEFAULT_PORTS if self.port is None else (self.port,)

    @property
    def wildcard(self) -> bool:
        """Whether this is `*.domain` (subdomains of `domain`)."""
        return self.host.startswith(WILDCARD)

    @property
    def domain(self) -> str:
        """The name after `*.` for a wildcard; the host itself otherwise."""
        return self.host.removeprefix(WILDCARD)

    def matches(self, host: str, port: int | None) -> bool:
        """Whether a request to `host`:`port` (port None: either default) is this destination."""
        name = host.lower().removesuffix(".")
        if self.wildcard:
            suffix = "." + self.domain
            hit = name.endswith(suffix) and len(name) > len(suffix)
        else:
            hit = name == self.host
        return hit and (port is None or port in self.ports)

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


def _parse_port(text: str, entry: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AllowEntryError(f"allow-list entry {entry!r}: the port must be 1-65535")
    return int(text)


def _parse_domain(text: str, entry: str) -> str:
    """The domain of a wildcard: a DNS name of two labels or more (`*.com` is too broad)."""
    domain = parse_host(text, entry)
    if _IPV4_RE.fullmatch(domain) or "." not in domain:
        raise AllowEntryError(
            f"allow-list entry {entry!r}: a wildcard needs a domain of two labels or more "
            "after '*.' (*.example.com), not an address or a top-level domain"
        )
    return domain


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
