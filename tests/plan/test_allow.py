"""Allow-list entries: `host`, `host:port` or a `*.domain` wildcard, anything else refused with
the entry named."""

from __future__ import annotations

import pytest

from sandbox_runner.errors import FksError
from sandbox_runner.plan.allow import AllowEntry, AllowEntryError


@pytest.mark.parametrize(
    ("text", "host", "port", "ports"),
    [
        ("example.com", "example.com", None, (80, 443)),
        (" API.Example.COM.:8443 ", "api.example.com", 8443, (8443,)),
        ("10.1.2.3", "10.1.2.3", None, (80, 443)),
        ("10.1.2.3:80", "10.1.2.3", 80, (80,)),
        ("localhost:1", "localhost", 1, (1,)),
        ("*.PythonHosted.org", "*.pythonhosted.org", None, (80, 443)),
        ("*.internal.example:8443", "*.internal.example", 8443, (8443,)),
    ],
)
def test_allow_entry_parses_host_and_port(
    text: str, host: str, port: int | None, ports: tuple[int, ...]
) -> None:
    entry = AllowEntry.parse(text)
    assert (entry.host, entry.port, entry.ports) == (host, port, ports)
    assert AllowEntry.parse(str(entry)) == entry


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a host name"),
        ("https://example.com", "give host or host:port, not a URL"),
        ("example.com/path", "not a URL"),
        ("::1", "IPv6 addresses are not supported"),
        ("[::1]:443", "IPv6 addresses are not supported"),
        ("example.com:", "the port must be 1-65535"),
        ("example.com:0", "the port must be 1-65535"),
        ("example.com:65536", "the port must be 1-65535"),
        ("example.com:https", "the port must be 1-65535"),
        ("300.1.2.3", "not an IPv4 address"),
        ("1.2.3", "not an IPv4 address"),
        ("-bad.example.com", "not a host name"),
        ("under_score.example.com", "not a host name"),
        ("two words", "not a host name"),
        ("a..b", "not a host name"),
        ("*", "a wildcard is '*.' before a domain"),
        ("*:443", "a wildcard is '*.' before a domain"),
        ("api.*.example.com", "a wildcard is '*.' before a domain"),
        ("*example.com", "a wildcard is '*.' before a domain"),
        ("*.com", "a wildcard needs a domain of two labels or more"),
        ("*.10.0.0.1", "a wildcard needs a domain of two labels or more"),
        ("*.*.example.com", "not a host name"),
        ("example.com\nhttp_access allow all", "not a host name"),
    ],
)
def test_allow_entry_refuses_garbage_naming_it(text: str, why: str) -> None:
    with pytest.raises(AllowEntryError) as caught:
        AllowEntry.parse(text)
    assert str(caught.value).startswith(f"allow-list entry {text!r}: ")
    assert why in str(caught.value)
    assert isinstance(caught.value, FksError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("entry", "host", "port", "hit"),
    [
        ("*.internal.example", "a.internal.example", 443, True),
        ("*.internal.example", "a.b.internal.example", 80, True),
        ("*.internal.example", "internal.example", 443, False),
        ("*.internal.example", "evilinternal.example", 443, False),
        ("*.internal.example", "a.internal.example.evil", 443, False),
        ("*.internal.example", "a.internal.example", 8443, False),
        ("*.internal.example:8443", "A.Internal.Example.", 8443, True),
        ("api.example.com", "api.example.com", None, True),
        ("api.example.com", "x.api.example.com", 443, False),
        ("api.example.com:8443", "api.example.com", 443, False),
    ],
)
def test_allow_entry_matches_its_destinations_only(
    entry: str, host: str, port: int | None, hit: bool
) -> None:
    assert AllowEntry.parse(entry).matches(host, port) is hit
