"""Squid's configuration: the allow-list, and the model API port that passes only the API's
calls, with the real credential on them and the API's own Host header."""

from __future__ import annotations

import re
import uuid

from sandbox_runner.backends.docker.egress.squid import (
    API_CALLS,
    API_PORT,
    FORWARD_PORT,
    squid_config,
)
from sandbox_runner.backends.docker.egress.upstream import ApiUpstream
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.secrets import Secret

REAL_KEY = "sk-ant-api03-REAL-" + uuid.uuid4().hex
REAL_TOKEN = "sk-ant-oat01-REAL-" + uuid.uuid4().hex
API_RULES = [
    "http_access deny manager",
    "http_access allow fks_api_call",
    "http_access allow fks_api_warm_up",
    "http_access deny fks_api",
]


def _access_rules(config: str) -> list[str]:
    return [line for line in config.splitlines() if line.startswith("http_access ")]


def test_config_allows_the_pairs_and_denies_everything_else() -> None:
    allow = [AllowEntry.parse(t) for t in ("github.com", "10.0.0.7:8080", "github.com")]
    config = squid_config(allow, None)
    lines = config.splitlines()
    assert f"http_port 127.0.0.1:{FORWARD_PORT} name=forward" in lines
    assert "acl allow1_host dstdomain -n github.com" in lines
    assert "acl allow1_port port 80 443" in lines
    assert "acl allow2_host dstdomain -n 10.0.0.7" in lines
    assert "acl allow2_port port 8080" in lines
    assert "acl allow3_host" not in config  # duplicates once
    assert _access_rules(config) == [
        "http_access deny manager",
        "http_access deny fks_api",
        "http_access allow allow1_host allow1_port",
        "http_access allow allow2_host allow2_port",
        "http_access deny all",
    ]
    for setting in ("pid_filename none", "cache deny all", "max_filedescriptors 1024"):
        assert setting in lines
    assert "accel" not in config and "cache_peer" not in config
    assert "request_header" not in config


def test_config_with_nothing_allowed_denies_all() -> None:
    assert _access_rules(squid_config([], None))[-1] == "http_access deny all"
    assert "allow1" not in squid_config([], None)


def test_config_accelerator_to_an_http_api_with_x_api_key() -> None:
    api = ApiUpstream("http://10.0.0.5:9000", REAL_KEY)
    config = squid_config([AllowEntry.parse("github.com")], api)
    lines = config.splitlines()
    assert (
        f"http_port 127.0.0.1:{API_PORT} accel defaultsite=10.0.0.5:9000 no-vhost name=api" in lines
    )
    assert (
        "cache_peer 10.0.0.5 parent 9000 0 no-query no-digest no-netdb-exchange originserver "
        "forceddomain=10.0.0.5:9000 name=fks_upstream_anthropic"
    ) in lines
    assert "cache_peer_access fks_upstream_anthropic allow fks_port_anthropic" in lines
    assert "cache_peer_access fks_upstream_anthropic deny all" in lines
    assert "never_direct allow fks_api" in lines
    assert "request_header_access X-Api-Key deny fks_api" in lines
    assert f'request_header_add X-Api-Key "{REAL_KEY}" fks_api_anthropic_call' in lines
    assert config.count(REAL_KEY) == 1
    assert _access_rules(config) == [
        *API_RULES,
        "http_access allow allow1_host allow1_port",
        "http_access deny all",
    ]


def test_config_accelerator_to_a_tls_api_with_a_bearer_token() -> None:
    api = ApiUpstream(
        "https://api.anthropic.com", REAL_TOKEN, "authorization", "CLAUDE_CODE_OAUTH_TOKEN"
    )
    lines = squid_config([], api).splitlines()
    assert (
        f"http_port 127.0.0.1:{API_PORT} accel defaultsite=api.anthropic.com no-vhost name=api"
        in lines
    )
    assert (
        "cache_peer api.anthropic.com parent 443 0 no-query no-digest no-netdb-exchange originserver "
        "forceddomain=api.anthropic.com name=fks_upstream_anthropic tls"
    ) in lines
    assert "request_header_access Authorization deny fks_api" in lines
    assert f'request_header_add Authorization "Bearer {REAL_TOKEN}" fks_api_anthropic_call' in lines
    assert not any(line.startswith("request_header_add X-Api-Key") for line in lines)


def test_config_https_api_on_another_port_names_it() -> None:
    config = squid_config([], ApiUpstream("https://llm.corp.example:8443", "k"))
    assert "defaultsite=llm.corp.example:8443 " in config
    assert "cache_peer llm.corp.example parent 8443 0 " in config
    assert " forceddomain=llm.corp.example:8443 " in config


def test_api_calls_are_the_ones_claude_code_makes_and_nothing_near_them() -> None:
    """The paths the API port passes (Squid's urlpath_regex is POSIX extended; these
    patterns mean the same in Python)."""
    allowed = {
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages?beta=true"),
        ("POST", "/v1/messages/count_tokens?beta=true"),
        ("GET", "/v1/models?limit=1000"),
        ("GET", "/v1/models/claude-sonnet-4-5?beta=true"),
    }
    refused = {
        ("GET", "/v1/messages"),
        ("POST", "/v1/messages?debug=1"),
        ("POST", "/v1/messages/"),
        ("POST", "/v1/messages/../echo"),
        ("POST", "/v1/messages/%2e%2e/echo"),
        ("POST", "//v1/messages"),
        ("POST", "/V1/MESSAGES"),
        ("POST", "/v1/messages;x"),
        ("POST", "/v1/models"),
        ("GET", "/v1/models/../../echo"),
        ("GET", "/v1/models/%2e%2e"),
        ("GET", "/v1/models?x=%0d%0a"),
        ("TRACE", "/v1/messages"),
    }

    def passes(method: str, path: str) -> bool:
        return any(m == method and re.search(p, path) for _, m, p in API_CALLS)

    assert {call for call in allowed | refused if passes(*call)} == allowed


# --- secrets by destination, deny, wildcards -----------------------------------------------------


def _secret(host: str, value: str = "REAL", **kwargs: object) -> Secret:
    entry = AllowEntry.parse(host)
    fields: dict[str, object] = {"header": "Authorization", "methods": ("GET", "POST")}
    fields |= kwargs
    return Secret(destination=entry, value=f"Bearer {value}", source="env T", **fields)  # type: ignore[arg-type]


def test_config_without_secrets_ends_no_tls() -> None:
    config = squid_config([AllowEntry.parse("github.com")], None)
    assert "ssl-bump" not in config and "ssl_bump" not in config and "sslcrtd" not in config


def test_config_with_a_secret_ends_tls_for_its_destination_only() -> None:
    token = "REAL-" + uuid.uuid4().hex
    config = squid_config(
        [AllowEntry.parse("pypi.org")],
        None,
        secrets=[_secret("api.openai.com", token)],
        origin_cas=True,
    )
    lines = config.splitlines()
    assert f"http_port 127.0.0.1:{FORWARD_PORT} name=forward ssl-bump" in config
    assert "acl fks_s1_host dstdomain -n api.openai.com" in lines
    assert "acl fks_s1_port port 80 443" in lines
    assert "acl fks_bump any-of fks_s1" in lines
    # Every other CONNECT spliced before its first byte is read; the secret's peeked, bumped.
    bump = [line for line in lines if line.startswith("ssl_bump ")]
    assert bump == ["ssl_bump splice !fks_bump", "ssl_bump peek fks_step1", "ssl_bump bump all"]
    assert "sslproxy_cert_error deny all" in lines
    assert "tls_outgoing_options cafile=/etc/fks-origin-cas.pem" in lines
    # The secret only over TLS and only on the agent's port, the agent's header removed first.
    assert "acl fks_s1_add all-of fks_s1 fks_https fks_forward" in lines
    assert "request_header_access Authorization deny fks_s1" in lines
    assert f'request_header_add Authorization "Bearer {token}" fks_s1_add' in lines
    assert config.count(token) == 1
    # Methods refused before anything is added; the destination allowed implicitly.
    assert _access_rules(config) == [
        "http_access deny manager",
        "http_access deny fks_api",
        "http_access deny CONNECT fks_in_tls",
        "http_access deny fks_s1 !CONNECT !fks_s1_methods",
        "http_access allow fks_s1",
        "http_access allow allow1_host allow1_port",
        "http_access deny all",
    ]
    assert "acl fks_s1_methods method GET POST" in lines


def test_config_deny_wins_and_wildcards_match_subdomains_only() -> None:
    config = squid_config(
        [AllowEntry.parse("*.pythonhosted.org"), AllowEntry.parse("*.internal.example:8443")],
        None,
        deny=[AllowEntry.parse("bad.pythonhosted.org")],
    )
    lines = config.splitlines()
    assert r"acl allow1_host dstdom_regex -n -i ^([a-z0-9_-]+\.)+pythonhosted\.org$" in lines
    assert r"acl allow2_host dstdom_regex -n -i ^([a-z0-9_-]+\.)+internal\.example$" in lines
    assert "acl allow2_port port 8443" in lines
    assert "acl deny1_host dstdomain -n bad.pythonhosted.org" in lines
    rules = _access_rules(config)
    assert rules.index("http_access deny deny1_host") < rules.index(
        "http_access allow allow1_host allow1_port"
    )
    # Squid's dstdom_regex is POSIX extended; the pattern means the same in Python.
    pattern = r"^([a-z0-9_-]+\.)+pythonhosted\.org$"
    hits = [h for h in ("files.pythonhosted.org", "a.b.pythonhosted.org") if re.search(pattern, h)]
    misses = ["pythonhosted.org", "evilpythonhosted.org", "files.pythonhosted.org.evil"]
    assert len(hits) == 2 and not any(re.search(pattern, h) for h in misses)


def test_config_a_request_two_secrets_match_gets_the_most_specific_one() -> None:
    wide, narrow = _secret("*.internal.example", "WIDE"), _secret("api.internal.example", "NARROW")
    config = squid_config([], None, secrets=[wide, narrow])
    lines = config.splitlines()
    assert "acl fks_s1_host dstdomain -n api.internal.example" in lines
    assert 'request_header_add Authorization "Bearer NARROW" fks_s1_add' in lines
    assert 'request_header_add Authorization "Bearer WIDE" fks_s2_add !fks_s1' in lines
