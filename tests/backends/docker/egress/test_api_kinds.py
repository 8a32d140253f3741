"""The model APIs by kind (Anthropic, OpenAI, Gemini): each one's key and address read as its
users set them, one accelerator per API a step needs, and (-m docker) an agent that cannot
reach another kind's API or key."""

from __future__ import annotations

import http.server
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.containers import run_behind_proxy

from sandbox_runner.backends.docker.egress.proxy import PLACEHOLDER, EgressProxy
from sandbox_runner.backends.docker.egress.squid import squid_config
from sandbox_runner.backends.docker.egress.upstream import (
    API_KINDS,
    agent_env,
    api_kinds,
    upstreams_for,
)
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.sandbox import SandboxSettings

KEYS = {
    "ANTHROPIC_API_KEY": "sk-ant-REAL-" + uuid.uuid4().hex,
    "OPENAI_API_KEY": "sk-openai-REAL-" + uuid.uuid4().hex,
    "GEMINI_API_KEY": "AIza-REAL-" + uuid.uuid4().hex,
}


def test_keys_and_base_urls_as_each_apis_users_set_them() -> None:
    anthropic, openai, gemini = upstreams_for(("anthropic", "openai", "gemini"), KEYS)
    assert (openai.url, openai.header, openai.env_name) == (
        "https://api.openai.com/v1",
        "authorization",
        "OPENAI_API_KEY",
    )
    assert (openai.host, openai.port, openai.path) == ("api.openai.com", 443, "/v1")
    assert (gemini.url, gemini.header) == (
        "https://generativelanguage.googleapis.com",
        "x-goog-api-key",
    )
    assert anthropic.kind == "anthropic" and anthropic.header == "x-api-key"
    moved = {**KEYS, "OPENAI_BASE_URL": "http://10.0.0.5:9000/v1/", "GOOGLE_GEMINI_BASE_URL": ""}
    openai, gemini = upstreams_for(("openai", "gemini"), moved)
    assert (openai.host, openai.port, openai.path, openai.tls) == ("10.0.0.5", 9000, "/v1", False)
    assert gemini.host == "generativelanguage.googleapis.com"
    assert upstreams_for(("openai", "gemini"), {"ANTHROPIC_API_KEY": "k"}) == ()
    # What the agent's environment gets: the proxy's port for its API, and a placeholder.
    assert agent_env(openai) == {
        "OPENAI_BASE_URL": "http://127.0.0.1:8081/v1",
        "OPENAI_API_KEY": PLACEHOLDER,
    }
    assert agent_env(gemini) == {
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:8082",
        "GEMINI_API_KEY": PLACEHOLDER,
    }


def test_a_steps_agent_kind_decides_its_apis() -> None:
    def agent(kind: Any, cli: str | None = None) -> AgentCommand:
        config = AgentConfig.model_validate({"cli": cli} if cli else {})
        return AgentCommand("a", kind, "prog", Path("/w"), config=config)

    plain = SandboxSettings.model_validate({"modelApis": ["openai"]})
    assert api_kinds(agent("claude"), plain) == ("anthropic",)
    assert api_kinds(agent("cli", "codex"), plain) == ("openai",)
    assert api_kinds(agent("cli", "gemini"), plain) == ("gemini",)
    assert api_kinds(agent("cli", "opencode"), plain) == ("anthropic",)
    assert api_kinds(agent("binary"), plain) == ("openai",)
    assert api_kinds(agent("binary"), SandboxSettings()) == ()


def test_config_one_accelerator_per_api_each_credential_on_its_own_calls_only() -> None:
    apis = upstreams_for(("anthropic", "openai", "gemini"), KEYS)
    config = squid_config([], apis)
    lines = config.splitlines()
    for kind, name in (("anthropic", "api"), ("openai", "api_openai"), ("gemini", "api_gemini")):
        port = API_KINDS[kind].port
        assert any(line.startswith(f"http_port 127.0.0.1:{port} accel ") for line in lines)
        assert any(line.endswith(f" name={name}") for line in lines)
        assert f"cache_peer_access fks_upstream_{kind} allow fks_port_{kind}" in lines
    assert "acl fks_api myportname api api_openai api_gemini" in lines
    assert 'request_header_add Authorization "Bearer ' + KEYS["OPENAI_API_KEY"] + '"' in config
    adds = [line for line in lines if line.startswith("request_header_add ")]
    assert adds == [
        f'request_header_add X-Api-Key "{KEYS["ANTHROPIC_API_KEY"]}" fks_api_anthropic_call',
        f'request_header_add Authorization "Bearer {KEYS["OPENAI_API_KEY"]}" fks_api_openai_call',
        f'request_header_add X-Goog-Api-Key "{KEYS["GEMINI_API_KEY"]}" fks_api_gemini_call',
    ]
    for header in ("X-Api-Key", "Authorization", "X-Goog-Api-Key"):
        assert f"request_header_access {header} deny fks_api" in lines
    # The base URL's path is part of every call the port passes.
    assert "acl fks_openai_responses_path urlpath_regex ^/v1/responses$" in lines


@pytest.mark.parametrize(
    ("kind", "allowed", "refused"),
    [
        (
            "openai",
            [("POST", "/responses"), ("GET", "/models"), ("GET", "/models/gpt-5")],
            [("GET", "/responses"), ("POST", "/responses/x"), ("POST", "/v1/messages")],
        ),
        (
            "gemini",
            [
                ("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
                ("POST", "/v1beta/models/gemini-2.5-flash:generateContent"),
                ("GET", "/v1beta/models"),
            ],
            [
                ("POST", "/v1beta/models/m:streamGenerateContent?alt=sse&x=1"),
                ("POST", "/v1beta/models/../echo:generateContent"),
                ("POST", "/v1/messages"),
                ("GET", "/v1beta/models/m:generateContent"),
            ],
        ),
    ],
)
def test_api_calls_of_each_kind(kind: Any, allowed: list[Any], refused: list[Any]) -> None:
    """Squid's urlpath_regex is POSIX extended; these patterns mean the same in Python."""

    def passes(method: str, path: str) -> bool:
        calls = API_KINDS[kind].calls
        return any(m == method and re.fullmatch(p, path) for _, m, p in calls)

    assert [call for call in allowed + refused if passes(*call)] == allowed


# --- an agent and another kind's API (-m docker) --------------------------------------------


class _Echo(http.server.ThreadingHTTPServer):
    """Answers 200 and records each request's path and headers."""

    def __init__(self) -> None:
        super().__init__((_bridge_gateway(), 0), _EchoHandler)
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    server: _Echo

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"path": self.path, "headers": dict(self.headers)})
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _bridge_gateway() -> str:
    network = docker_client().networks.get("bridge")
    return str(network.attrs["IPAM"]["Config"][0]["Gateway"])


@pytest.fixture
def origins() -> Iterator[tuple[_Echo, _Echo]]:
    anthropic, openai = _Echo(), _Echo()
    yield anthropic, openai
    anthropic.shutdown()
    openai.shutdown()


_PROBE = """
code() { name=$1; shift; echo "$name=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$@")"; }
code own -X POST -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/messages"
code other_port -X POST -d '{}' http://127.0.0.1:8081/v1/responses
code other_by_proxy -X POST -d '{}' --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.1:8081/v1/responses
code other_path -X POST -d '{}' "$ANTHROPIC_BASE_URL/v1/responses"
ls /fks-proxy | sed 's/^/socket=/'
env | grep -c REAL- | sed 's/^/real=/'
"""


@pytest.mark.docker
def test_an_agent_reaches_its_own_api_only_and_never_anothers_key(
    origins: tuple[_Echo, _Echo],
) -> None:
    """A step of the Anthropic kind gets a proxy with that API only: OpenAI's port, socket and
    key are nowhere it can reach, and its own port passes no other API's call."""
    anthropic, openai = origins
    env = {**KEYS, "ANTHROPIC_BASE_URL": anthropic.url, "OPENAI_BASE_URL": openai.url + "/v1"}
    client = docker_client()
    apis = upstreams_for(("anthropic",), env)
    with EgressProxy(client, run_id=f"kinds-{uuid.uuid4().hex[:8]}", allow=[], apis=apis) as proxy:
        ran = run_behind_proxy(client, proxy, _PROBE, labels={"fks.test": "egress"}, timeout=60)
    found = dict(line.split("=", 1) for line in ran.output.splitlines() if "=" in line)
    assert found["own"] == "200", ran.output
    assert found["other_port"] == "000"  # nothing listens: no forwarder, no socket
    assert found["other_by_proxy"] == "403"
    assert found["other_path"] == "403"
    sockets = {
        v for k, v in (line.split("=", 1) for line in ran.output.splitlines()) if k == "socket"
    }
    assert sockets == {"proxy.sock", "api.sock"}
    assert found["real"] == "0"
    assert openai.seen == []
    assert [s["path"] for s in anthropic.seen] == ["/v1/messages"]
    sent = {k.lower(): v for k, v in anthropic.seen[0]["headers"].items()}
    assert sent["x-api-key"] == KEYS["ANTHROPIC_API_KEY"]
    assert KEYS["OPENAI_API_KEY"] not in str(anthropic.seen)


def test_config_with_the_meter_sends_every_api_through_it_and_the_agent_never_to_it() -> None:
    apis = upstreams_for(("anthropic", "openai"), KEYS)
    lines = squid_config([], apis, meter_port=3130).splitlines()
    peers = [line for line in lines if line.startswith("cache_peer ")]
    assert peers == [
        "cache_peer 127.0.0.1 parent 3130 0 no-query no-digest no-netdb-exchange originserver "
        f"forceddomain={site} name=fks_upstream_{kind}"
        for site, kind in (("api.anthropic.com", "anthropic"), ("api.openai.com", "openai"))
    ]
    rules = [line for line in lines if line.startswith("http_access ")]
    assert rules.index("http_access deny fks_meter_port fks_loopback") < rules.index(
        "http_access deny all"
    )
    assert "acl fks_loopback dst 127.0.0.0/8 ::1" in lines
