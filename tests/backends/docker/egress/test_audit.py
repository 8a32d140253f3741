"""The egress audit: Squid's access log lines parsed (every field, bounded, of any form) and
counted per kind of request in bounded memory, the allow-list's refusals among them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sandbox_runner.backends.docker.egress.access_log import MODEL_API, AccessLine, access_line
from sandbox_runner.backends.docker.egress.audit import (
    COUNTED,
    NETWORK_LISTED,
    TrafficCounter,
    merged,
)
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.egress.refusals import Denied, Refusals
from sandbox_runner.backends.docker.egress.squid import API_PORT, FORWARD_PORT
from sandbox_runner.results.reported import NetworkRecord, RequestsRecord

F, A = FORWARD_PORT, API_PORT


def test_every_field_of_a_line() -> None:
    line = access_line(f"1700000000.125 TCP_TUNNEL/200 CONNECT github.com 443 {F} 517 6120 -")
    assert line == AccessLine(
        when=1700000000.125,
        result="TCP_TUNNEL",
        status=200,
        method="CONNECT",
        host="github.com",
        port=443,
        local_port=F,
        sent=517,
        received=6120,
        secret=None,
    )
    secret = access_line(f"1.5 TCP_MISS/401 GET api.x.test 443 {F} 90 300 *.x.test")
    assert secret is not None and secret.secret == "*.x.test" and secret.status == 401
    denied = access_line(f"2.0 TCP_DENIED/403 GET evil.test 80 {F} 120 3900 -")
    assert (
        denied is not None
        and denied.refused
        and denied.key
        == (
            "evil.test",
            80,
            "GET",
            403,
            "TCP_DENIED",
            None,
        )
    )
    # Refused, and the agent did not wait for the answer: still refused.
    aborted = access_line(f"2.0 TCP_DENIED_ABORTED/403 GET evil.test 80 {F} 71 0 -")
    assert aborted is not None and aborted.refused
    other = access_line(f"2.0 TCP_DENIEDX/403 GET evil.test 80 {F} 71 0 -")
    assert other is not None and not other.refused
    # The format before bytes and secrets were logged.
    old = access_line(f"3.0 TCP_DENIED/403 GET evil.test 80 {F}")
    assert old is not None and (old.sent, old.received, old.secret) == (0, 0, None)
    # Squid's 000: no HTTP status was sent.
    none = access_line(f"4.0 NONE_NONE/000 NONE - - {F} 0 0 -")
    assert none is not None and (none.status, none.host, none.port) == (None, "-", None)
    # A CONNECT Squid answered itself to end its TLS (a secret's destination): a tunnel opened
    # for a secret, not an unreadable request; a request it could not read stays NONE_NONE.
    bumped = access_line(f"5.0 NONE_NONE/200 CONNECT api.test 443 {F} 112 0 -")
    assert bumped is not None and (bumped.result, bumped.secret) == ("SECRET_TUNNEL", None)
    unreadable = access_line(f"5.0 NONE_NONE/400 CONNECT api.test 443 {F} 112 0 -")
    assert unreadable is not None and unreadable.result == "NONE_NONE"


def test_the_model_apis_calls_carry_its_credential() -> None:
    call = access_line(f"1.0 TCP_MISS/200 POST api.test 443 {A} 2000 800 -")
    models = access_line(f"1.0 TCP_MISS/200 GET api.test 443 {A} 200 800 -")
    warm_up = access_line(f"1.0 TCP_MISS/200 HEAD api.test 443 {A} 80 100 -")
    refused = access_line(f"1.0 TCP_DENIED/403 POST api.test 443 {A} 200 100 -")
    via_forward = access_line(f"1.0 TCP_MISS/200 POST api.test 443 {F} 200 100 -")
    assert call is not None and call.secret == MODEL_API
    assert models is not None and models.secret == MODEL_API
    assert warm_up is not None and warm_up.secret is None
    assert refused is not None and refused.secret is None and not refused.refused
    assert via_forward is not None and via_forward.secret is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "fks-proxy ready",
        "garbage line with enough fields to be read as one but no time at all",
        f"notatime TCP_DENIED/403 GET evil.test 80 {F} 1 1 -",
        f"nan TCP_DENIED/403 GET evil.test 80 {F} 1 1 -",
        f"inf TCP_DENIED/403 GET evil.test 80 {F} 1 1 -",
        f"1.0 TCP_DENIED GET evil.test 80 {F} 1 1 -",  # no status part
        f"1.0 TCP_DENIED/403 GET evil.test 80 {F} extra",  # 7 fields
        f"1.0 TCP_DENIED/403 GET evil.test 80 {F} 1 1",  # 8 fields
    ],
)
def test_lines_that_are_no_request(line: str) -> None:
    assert access_line(line) is None


def test_fields_of_the_wrong_form_are_none_or_zero() -> None:
    line = access_line(f"1.0 TCP_MISS/2x0 GET h.test 99999 {F} -12 {'9' * 40} -")
    assert line is not None
    assert (line.status, line.port, line.sent, line.received) == (None, None, 0, 0)
    for port in ("0", "65536", "+80", "８０", "-", "1e3"):
        parsed = access_line(f"1.0 TCP_MISS/200 GET h.test {port} {F} 1 1 -")
        assert parsed is not None and parsed.port is None, port
    unknown = access_line("1.0 TCP_DENIED/403 GET h.test 80 9999 1 1 -")
    assert unknown is not None and unknown.local_port == 9999 and not unknown.refused


def test_huge_fields_are_bounded() -> None:
    host, note, method = "a" * 70_000, "s" * 5000, "M" * 500
    line = access_line(f"1.0 {'R' * 500}/403 {method} {host} 443 {F} 1 1 {note}")
    assert line is not None
    assert len(line.host) == 253 and line.host.endswith("\u2026")
    assert line.secret is not None and len(line.secret) == 253
    assert len(line.method) == 40 and len(line.result) == 40
    # A host Squid logged with a space in it cannot shift the other fields.
    spaced = access_line(f"1.0 TCP_DENIED/403 GET a b.test 80 {F} 1 2 -")
    assert spaced is not None and (spaced.host, spaced.port, spaced.received) == ("a b.test", 80, 2)


def counted(*lines: str) -> TrafficCounter:
    counter = TrafficCounter()
    for text in lines:
        line = access_line(text)
        assert line is not None, text
        counter.add(line)
    return counter


def test_requests_are_counted_per_kind_with_their_bytes() -> None:
    counter = counted(
        f"1.0 TCP_TUNNEL/200 CONNECT github.com 443 {F} 500 6000 -",
        f"1.1 TCP_TUNNEL/200 CONNECT github.com 443 {F} 700 4000 -",
        f"1.2 TCP_DENIED/403 GET evil.test 80 {F} 100 300 -",
        f"1.3 TCP_MISS/200 POST api.test 443 {A} 2000 900 -",
        f"1.4 TCP_MISS/404 GET github.com 443 {F} 80 90 -",
    )
    taken = counter.take()
    assert taken.network == NetworkRecord(
        requests=[
            RequestsRecord(
                host="github.com",
                port=443,
                method="CONNECT",
                status=200,
                result="TCP_TUNNEL",
                count=2,
                sent=1200,
                received=10000,
            ),
            RequestsRecord(
                host="api.test",
                port=443,
                method="POST",
                status=200,
                result="TCP_MISS",
                secret=MODEL_API,
                count=1,
                sent=2000,
                received=900,
            ),
            RequestsRecord(
                host="evil.test",
                port=80,
                method="GET",
                status=403,
                result="TCP_DENIED",
                count=1,
                sent=100,
                received=300,
            ),
            RequestsRecord(
                host="github.com",
                port=443,
                method="GET",
                status=404,
                result="TCP_MISS",
                count=1,
                sent=80,
                received=90,
            ),
        ]
    )
    assert taken.refusals == Refusals((Denied("evil.test", 80, 1),))
    assert counter.take().network == NetworkRecord()  # each request is counted once


def test_rows_are_bounded_and_the_rest_summed_up() -> None:
    most = [f"1.0 TCP_DENIED/403 GET most.test 80 {F} 10 20 -"] * 3
    each = [f"1.0 TCP_DENIED/403 GET h{n}.test 80 {F} 1 2 -" for n in range(COUNTED + 200)]
    taken = counted(*most, *each).take()
    network = taken.network
    assert len(network.requests) == NETWORK_LISTED
    assert network.requests[0].host == "most.test" and network.requests[0].count == 3
    assert network.total == 3 + COUNTED + 200
    assert network.more == COUNTED + 200 - (NETWORK_LISTED - 1)
    assert (network.more_sent, network.more_received) == (network.more, 2 * network.more)
    refusals = taken.refusals
    assert refusals.listed[0] == Denied("most.test", 80, 3)
    assert sum(d.count for d in refusals.listed) + refusals.more == 3 + COUNTED + 200


def test_merged_lists_both_as_one_take_would() -> None:
    first = counted(*[f"1.0 TCP_MISS/200 GET a.test 80 {F} 1 1 -"] * 2).take().network
    rows = [f"1.0 TCP_MISS/200 GET b{n}.test 80 {F} 1 1 -" for n in range(NETWORK_LISTED)]
    second = counted(f"2.0 TCP_MISS/200 GET a.test 80 {F} 5 5 -", *rows).take().network
    both = merged(first, second)
    assert both.requests[0].host == "a.test" and both.requests[0].count == 3
    assert both.requests[0].sent == 7
    assert len(both.requests) == NETWORK_LISTED and both.total == 3 + NETWORK_LISTED
    assert both.more == 1 and merged(NetworkRecord(), NetworkRecord()) == NetworkRecord()


class _LogContainer:
    """The proxy container as `_follow_log` sees it: its output in arbitrary chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def logs(self, **_: Any) -> Iterator[bytes]:
        return iter(self.chunks)


def test_the_proxy_counts_every_line_of_its_output() -> None:
    """From the bytes of the proxy's output to a take: lines cut anywhere, a line far over
    the line limit, the ready line and garbage among them."""
    lines = (
        b"fks-proxy ready\n"
        + f"1.0 TCP_TUNNEL/200 CONNECT github.com 443 {F} 500 6000 -\n".encode()
        + b"\x00\xff garbage\n"
        + f"1.1 TCP_DENIED/403 GET {'x' * 200_000}.test 80 {F} 1 2 -\n".encode()
        + f"1.2 TCP_DENIED/403 GET evil.test 80 {F} 100 300 -\n".encode()
    )
    proxy = EgressProxy(object(), run_id="r", allow=[])
    proxy._container = _LogContainer([lines[i : i + 7] for i in range(0, len(lines), 7)])
    proxy._follow_log()
    taken = proxy.take_traffic()
    hosts = [(r.host, r.method, r.count) for r in taken.network.requests]
    assert sorted(hosts) == [("evil.test", "GET", 1), ("github.com", "CONNECT", 1)], hosts
    assert taken.refusals == Refusals((Denied("evil.test", 80, 1),))
    assert proxy.take_traffic().network.total == 0


def test_a_connection_that_sent_nothing_is_no_request() -> None:
    """The forwarder's readiness probe (and any connection closed before a request) is logged
    by Squid as NONE_NONE with no method: it is not in the audit, nor a refusal."""
    assert access_line(f"1700000000.000 NONE_NONE/000 - - - {FORWARD_PORT} 0 0 -") is None
    refused = access_line(f"1700000000.000 TCP_DENIED/403 NONE - - {FORWARD_PORT} 12 0 -")
    assert refused is not None and refused.result == "TCP_DENIED"
