"""Egress control: the allow-list, Squid's config, the access log, and (-m docker) an agent
container on network none that reaches only allowed hosts, and the API only with a key it
never holds."""

from __future__ import annotations

import base64
import http.server
import json
import re
import shlex
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from fks_testing.containers import run_behind_proxy
from fks_testing.sandboxed import RUNTIMES

from sandbox_runner.backends.docker.egress.proxy import PLACEHOLDER, SETTLE_S, EgressProxy
from sandbox_runner.backends.docker.egress.refusals import Denied, Refusals, parse_denied
from sandbox_runner.backends.docker.egress.squid import API_PORT, FORWARD_PORT
from sandbox_runner.backends.docker.egress.upstream import ApiUpstream
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import FksError, SandboxError
from sandbox_runner.images import base_image
from sandbox_runner.images import lookup as images
from sandbox_runner.plan.allow import AllowEntry

# The lab (network, servers) and the proxy image trusting a test CA are made once, on one
# xdist worker.
pytestmark = pytest.mark.xdist_group("egress")

REAL_KEY = "sk-ant-api03-REAL-" + uuid.uuid4().hex
REAL_TOKEN = "sk-ant-oat01-REAL-" + uuid.uuid4().hex

# --- the API upstream --------------------------------------------------------------------------


def test_api_upstream_from_claude_code_variables() -> None:
    assert ApiUpstream.from_env({}) is None
    assert ApiUpstream.from_env({"ANTHROPIC_API_KEY": ""}) is None
    key = ApiUpstream.from_env({"ANTHROPIC_API_KEY": "k1", "CLAUDE_CODE_OAUTH_TOKEN": "t1"})
    assert key == ApiUpstream("https://api.anthropic.com", "k1", "x-api-key", "ANTHROPIC_API_KEY")
    assert (key.host, key.port, key.tls) == ("api.anthropic.com", 443, True)
    oauth = ApiUpstream.from_env(
        {"CLAUDE_CODE_OAUTH_TOKEN": "t1", "ANTHROPIC_BASE_URL": "http://10.0.0.5:9000"}
    )
    assert oauth == ApiUpstream(
        "http://10.0.0.5:9000", "t1", "authorization", "CLAUDE_CODE_OAUTH_TOKEN"
    )
    assert (oauth.host, oauth.port, oauth.tls) == ("10.0.0.5", 9000, False)
    auth = ApiUpstream.from_env({"ANTHROPIC_AUTH_TOKEN": "t2"})
    assert auth is not None and (auth.header, auth.env_name) == (
        "authorization",
        "ANTHROPIC_AUTH_TOKEN",
    )


def test_api_credential_is_never_shown() -> None:
    upstream = ApiUpstream("https://api.anthropic.com", REAL_KEY)
    assert REAL_KEY not in repr(upstream) and REAL_KEY not in str(upstream)
    bad = 'sk-"quoted"%{macro}'
    with pytest.raises(SandboxError) as caught:
        ApiUpstream("https://api.anthropic.com", bad)
    assert bad not in str(caught.value)
    assert "ANTHROPIC_API_KEY has characters the egress proxy cannot pass on" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("api.anthropic.com", "must be http(s)://host[:port]"),
        ("ftp://api.anthropic.com", "must be http(s)://host[:port]"),
        ("https://api.anthropic.com/v1?x=1", "remove the query"),
        ("https://api.anthropic.com/v1/%2e%2e", "a plain path"),
        ("https://u:p@api.anthropic.com", "remove the query and user part"),
        ("https://api.anthropic.com:99999", "the port must be 1-65535"),
        ("https://bad_host", "not a host name"),
    ],
)
def test_api_url_must_be_a_bare_origin(url: str, why: str) -> None:
    with pytest.raises(FksError, match=re.escape(why)):
        ApiUpstream(url, "k")


# --- the access log ----------------------------------------------------------------------------

LOG = f"""\
1700000000.100 TCP_MISS/200 GET 10.0.0.7 8080 {FORWARD_PORT}
1700000001.200 TCP_DENIED/403 CONNECT evil.example 443 {FORWARD_PORT}
1700000002.300 TCP_DENIED/403 GET evil.example 443 {FORWARD_PORT}
1700000003.400 TCP_DENIED/403 GET 10.0.0.7 22 {FORWARD_PORT}
1700000003.500 TCP_DENIED/403 GET fks-proxy {FORWARD_PORT} {API_PORT}
1700000004.600 TCP_DENIED/403 NONE - - {FORWARD_PORT}
1700000005.700 TCP_TUNNEL/200 CONNECT github.com 443 {FORWARD_PORT}
garbage line
1700000006.800 TCP_DENIED/403 CONNECT evil.example 443 {FORWARD_PORT} extra
notatime TCP_DENIED/403 CONNECT evil.example 443 {FORWARD_PORT}
"""


def test_denied_requests_grouped_per_host_and_port() -> None:
    assert parse_denied(LOG) == [
        Denied("evil.example", 443, 2),
        Denied("-", None, 1),
        Denied("10.0.0.7", 22, 1),
    ]
    assert parse_denied(LOG, since=1700000002.3) == [
        Denied("-", None, 1),
        Denied("10.0.0.7", 22, 1),
        Denied("evil.example", 443, 1),
    ]
    assert parse_denied("") == []
    long = f"1700000007.0 TCP_DENIED/403 GET {'a' * 3000}.test 99999999 {FORWARD_PORT}"
    [refused] = parse_denied(long)
    assert len(refused.host) == 253 and refused.host.endswith("\u2026") and refused.port is None


def test_agent_env_and_argv() -> None:
    proxy = EgressProxy(
        object(), run_id="r", allow=[], api=ApiUpstream("https://api.anthropic.com", REAL_KEY)
    )
    env = proxy.env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://127.0.0.1:{FORWARD_PORT}"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1"
    assert env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{API_PORT}"
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER
    assert REAL_KEY not in json.dumps(env)
    argv = proxy.wrap_argv(["claude", "-p", "it's $HOME"])
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "claude", "-p", "it's $HOME"]
    assert argv[2].endswith('exec "$@"') and REAL_KEY not in argv[2]
    without_api = EgressProxy(object(), run_id="r", allow=[])
    with pytest.raises(SandboxError, match="not running"):
        without_api.take_denied()
    assert "ANTHROPIC_BASE_URL" not in without_api.env()
    assert "api.sock" not in without_api.wrap_argv(["true"])[2]


# --- the real thing (needs Docker, fks-proxy and fks-agent: scripts/build-images) ---------------


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request with what it received, and records it on the server."""

    server: _EchoServer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        seen = {"server": self.server.name, "path": self.path, "headers": dict(self.headers)}
        self.server.seen.append(seen)
        body = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _EchoServer(http.server.ThreadingHTTPServer):
    def __init__(self, host: str, name: str) -> None:
        super().__init__((host, 0), _EchoHandler)
        self.name = name
        self.seen: list[dict[str, Any]] = []
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


@dataclass
class Lab:
    """A bridge network this test made, echo servers on its gateway address (the host)."""

    client: Any
    network: str
    gateway: str
    allowed: _EchoServer
    api: _EchoServer
    extra_hosts: dict[str, str] = field(default_factory=dict)

    def proxy(self, api: ApiUpstream | None = None, **kwargs: Any) -> EgressProxy:
        allow = [
            AllowEntry.parse(f"{self.gateway}:{self.allowed.port}"),
            AllowEntry.parse(f"allowed.test:{self.allowed.port}"),
        ]
        return EgressProxy(
            self.client,
            run_id=f"egress-test-{uuid.uuid4().hex[:8]}",
            allow=allow,
            api=api,
            labels={"fks.test": "egress"},
            network=self.network,
            extra_hosts=self.extra_hosts,
            **kwargs,
        )

    def agent(self, proxy: EgressProxy, script: str, runtime: str = "runc") -> tuple[int, str]:
        """`script` in an agent container as the sandbox runs it (production's settings):
        network none, the socket volume, the proxy env, the forwarders; an arbitrary uid, no
        capabilities; under `runtime`."""
        ran = run_behind_proxy(
            self.client, proxy, script, labels={"fks.test": "egress"}, runtime=runtime, timeout=60
        )
        return ran.code, ran.output


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    client = docker_client()
    for image in (images.DEFAULT_PROXY_IMAGE, images.DEFAULT_AGENT_IMAGE):
        try:
            images.require_image(client, image)
        except SandboxError as exc:
            pytest.fail(f"{exc} (scripts/build-images makes it)")
    network = client.networks.create(
        f"fks-egress-test-{uuid.uuid4().hex[:8]}", driver="bridge", labels={"fks.test": "egress"}
    )
    try:
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        allowed, api = _EchoServer(gateway, "allowed"), _EchoServer(gateway, "api")
        hosts = {"allowed.test": gateway, "denied.test": gateway}
        try:
            yield Lab(client, network.name, gateway, allowed, api, hosts)
        finally:
            allowed.shutdown()
            api.shutdown()
    finally:
        network.remove()


def _leftovers(lab: Lab, run_label: str) -> list[Any]:
    selector = {"label": f"fks.run={run_label}"}
    return [
        *lab.client.containers.list(all=True, filters=selector, ignore_removed=True),
        *lab.client.volumes.list(filters=selector),
    ]


def _codes(output: str) -> list[str]:
    return [line.removeprefix("code=") for line in output.splitlines() if line.startswith("code=")]


@pytest.mark.docker
def test_agent_reaches_allowed_hosts_only_and_refusals_are_reported(lab: Lab) -> None:
    gw, ok, other = lab.gateway, lab.allowed.port, lab.api.port
    get = 'curl -s -o /dev/null -w "code=%{http_code}\\n"'
    tunnel = 'curl -s -o /dev/null -p -w "code=%{http_connect}\\n"'  # CONNECT host:port
    script = "; ".join(
        [
            f"{get} http://{gw}:{ok}/by-ip",
            f"{get} http://allowed.test:{ok}/by-name",
            f"{tunnel} http://allowed.test:{ok}/tunnel",
            f"{get} http://{gw}:{other}/other-port",
            f"{get} http://denied.test:{ok}/other-name",  # same address, name not allowed
            f"{tunnel} http://denied.test:{ok}/tunnel",
            "true",
        ]
    )
    with lab.proxy() as proxy:
        code, output = lab.agent(proxy, script)
        denied = proxy.take_denied(settled_at=time.time() + SETTLE_S)
        again = proxy.take_denied()
    assert code == 0, output
    assert _codes(output) == ["200", "200", "200", "403", "403", "403"]
    assert [seen["path"] for seen in lab.allowed.seen[-3:]] == ["/by-ip", "/by-name", "/tunnel"]
    assert lab.allowed.seen[-2]["headers"]["Host"] == f"allowed.test:{ok}"
    assert not any(seen["path"] == "/other-port" for seen in lab.api.seen)
    assert denied == Refusals((Denied("denied.test", ok, 2), Denied(gw, other, 1)))
    assert again == Refusals()  # each refusal is counted once


@pytest.mark.docker
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_agent_has_no_direct_connection_and_no_dns(lab: Lab, runtime: str) -> None:
    gw, ok = lab.gateway, lab.allowed.port
    script = "; ".join(
        [
            f"curl -s -m 5 --noproxy '*' http://{gw}:{ok}/direct; echo direct=$?",
            f"curl -s -m 5 --noproxy '*' http://host.docker.internal:{ok}/; echo hdi=$?",
            "getent hosts example.com; echo dns=$?",
            "getent hosts host.docker.internal; echo hdi_dns=$?",
            "touch /fks-proxy/x 2>/dev/null; echo write=$?",
            "ls /fks-proxy",
            # The network interfaces (gVisor has no /sys/class/net: its /proc/net/dev lists them)
            "ls /sys/class/net 2>/dev/null || tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        ]
    )
    with lab.proxy() as proxy:
        code, output = lab.agent(proxy, script, runtime)
    assert code == 0, output
    lines = output.splitlines()
    assert "direct=7" in lines  # connection refused: nothing to connect through
    assert "hdi=6" in lines  # could not resolve
    assert "dns=2" in lines and "hdi_dns=2" in lines
    assert "write=1" in lines  # the socket volume is read-only to the agent
    assert "api.sock" not in lines and "proxy.sock" in lines  # a proxy without an API
    assert lines[-1] == "lo"
    assert not any(seen["path"] == "/direct" for seen in lab.allowed.seen)


@pytest.mark.docker
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_api_key_is_added_by_the_proxy_and_never_held_by_the_agent(lab: Lab, runtime: str) -> None:
    api = ApiUpstream(f"http://{lab.gateway}:{lab.api.port}", REAL_KEY)
    ok = lab.allowed.port
    script = "; ".join(
        [
            'curl -s -H "x-api-key: $ANTHROPIC_API_KEY" -d "{}" "$ANTHROPIC_BASE_URL/v1/messages"',
            "echo",
            f'curl -s -H "x-api-key: $ANTHROPIC_API_KEY" http://{lab.gateway}:{ok}/leak',
            "echo",
            'curl -s -o /dev/null -w "mgr=%{http_code}\\n" '
            '"$ANTHROPIC_BASE_URL/squid-internal-mgr/config"',
            "env",
            "grep -rls sk-ant-api03 /etc /home /tmp /fks-proxy /workspace | sed 's/^/found: /'",
        ]
    )
    with lab.proxy(api=api) as proxy:
        code, output = lab.agent(proxy, script, runtime)
    assert code == 0, output
    assert REAL_KEY not in output.replace(REAL_KEY, "", 1)  # the one echo of the API server
    to_api = lab.api.seen[-1]
    assert to_api["path"] == "/v1/messages"
    keys = [v for k, v in to_api["headers"].items() if k.lower() == "x-api-key"]
    assert keys == [REAL_KEY]
    to_allowed = lab.allowed.seen[-1]
    assert to_allowed["path"] == "/leak"
    assert to_allowed["headers"]["x-api-key"] == PLACEHOLDER
    assert "mgr=403" in output.splitlines()
    env = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER
    assert env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{API_PORT}"
    assert "found: " not in output  # no file the agent can read holds a key


@pytest.mark.docker
def test_bearer_token_is_replaced(lab: Lab) -> None:
    api = ApiUpstream(
        f"http://{lab.gateway}:{lab.api.port}",
        REAL_TOKEN,
        "authorization",
        "CLAUDE_CODE_OAUTH_TOKEN",
    )
    script = (
        'curl -s -o /dev/null -H "Authorization: Bearer $CLAUDE_CODE_OAUTH_TOKEN" -d "{}" '
        '"$ANTHROPIC_BASE_URL/v1/messages"; env'
    )
    with lab.proxy(api=api) as proxy:
        code, output = lab.agent(proxy, script)
    assert code == 0, output
    assert REAL_TOKEN not in output
    assert f"CLAUDE_CODE_OAUTH_TOKEN={PLACEHOLDER}" in output.splitlines()
    headers = lab.api.seen[-1]["headers"]
    assert [v for k, v in headers.items() if k.lower() == "authorization"] == [
        f"Bearer {REAL_TOKEN}"
    ]


@pytest.fixture(scope="module")
def tls_api(
    lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[_EchoServer, str, str]]:
    """An HTTPS echo server on the gateway as `api.test`, its URL, and a proxy image trusting
    its CA (as `fks image build --ca-cert` would make it)."""
    tmp = tmp_path_factory.mktemp("tls")
    openssl = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
    subject = ["-subj", "/CN=fks-egress-test", "-addext", "subjectAltName=DNS:api.test"]
    subprocess.run(
        [*openssl.split(), *subject, "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "ca.crt")],
        check=True,
        capture_output=True,
    )
    (tmp / "Dockerfile").write_text(
        f"FROM {images.DEFAULT_PROXY_IMAGE}\nUSER root\n"
        "COPY ca.crt /usr/local/share/ca-certificates/fks-egress-test.crt\n"
        "RUN update-ca-certificates\nUSER proxy\n"
    )
    tag = f"fks-proxy:egress-test-{uuid.uuid4().hex[:8]}"
    lab.client.images.build(path=str(tmp), tag=tag, rm=True, forcerm=True, pull=False)
    server = _EchoServer(lab.gateway, "tls-api")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "ca.crt", tmp / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    lab.extra_hosts["api.test"] = lab.gateway
    try:
        yield server, f"https://api.test:{server.port}", tag
    finally:
        server.shutdown()
        lab.client.images.remove(tag, force=True)


@pytest.mark.docker
def test_api_over_tls_gets_the_key_and_an_unknown_certificate_gets_nothing(
    lab: Lab, tls_api: tuple[_EchoServer, str, str]
) -> None:
    server, url, trusting_image = tls_api
    api = ApiUpstream(url, REAL_KEY)
    script = 'curl -s -o /dev/null -w "code=%{http_code}\\n" -H "x-api-key: $ANTHROPIC_API_KEY" -d "{}" "$ANTHROPIC_BASE_URL/v1/messages"'
    with lab.proxy(api=api, image=trusting_image) as proxy:
        code, output = lab.agent(proxy, script)
    assert (code, _codes(output)) == (0, ["200"]), output
    (seen,) = server.seen
    assert seen["path"] == "/v1/messages"
    assert [v for k, v in seen["headers"].items() if k.lower() == "x-api-key"] == [REAL_KEY]
    assert seen["headers"]["Host"] == url.removeprefix("https://")
    with lab.proxy(api=api) as proxy:  # the stock image does not trust the test CA
        code, output = lab.agent(proxy, script)
    assert code == 0 and _codes(output) == ["503"], output
    assert len(server.seen) == 1


@pytest.mark.docker
def test_proxy_and_volume_are_labelled_and_removed_on_error_and_interrupt(lab: Lab) -> None:
    for exc_type in (RuntimeError, KeyboardInterrupt):
        proxy = lab.proxy()
        run_label = proxy._labels["fks.run"]
        with pytest.raises(exc_type), proxy:
            (container,) = lab.client.containers.list(filters={"label": f"fks.run={run_label}"})
            assert container.labels["fks.pid"].isdigit()
            assert container.labels["fks.role"] == "egress-proxy"
            assert [
                v.name for v in lab.client.volumes.list(filters={"label": f"fks.run={run_label}"})
            ] == [proxy.volume_name]
            raise exc_type("stop")
        assert _leftovers(lab, run_label) == []


@pytest.mark.docker
def test_a_volume_still_used_by_an_agent_container_is_an_error_naming_it(lab: Lab) -> None:
    proxy = lab.proxy()
    run_label = proxy._labels["fks.run"]
    in_use = r"Could not remove the egress proxy's volume .*remove its agent containers first"
    with pytest.raises(SandboxError, match=in_use), proxy:
        left = lab.client.containers.create(
            images.DEFAULT_AGENT_IMAGE, "true", mounts=[proxy.mount()], network_mode="none"
        )
    left.remove(force=True)
    lab.client.volumes.get(proxy.volume_name).remove()
    assert _leftovers(lab, run_label) == []


@pytest.mark.docker
def test_a_proxy_that_cannot_start_is_an_error_with_its_output_and_leaves_nothing(lab: Lab) -> None:
    proxy = lab.proxy(image=base_image.LOCAL_BASE_IMAGE, ready_timeout=10)  # no squid in it
    run_label = proxy._labels["fks.run"]
    with (
        pytest.raises(
            SandboxError,
            match=r"egress proxy container .* exited before it was ready: .*squid: not found",
        ),
        proxy,
    ):
        pass
    assert _leftovers(lab, run_label) == []


@pytest.mark.docker
def test_bench_proxy_start_up(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    """Not an assertion: how long a run waits for its proxy (target <= 1 s), and removal."""
    api = ApiUpstream(f"http://{lab.gateway}:{lab.api.port}", REAL_KEY)
    starts: list[float] = []
    stops: list[float] = []
    for _ in range(3):
        proxy = lab.proxy(api=api)
        with proxy:
            pass
        assert proxy.startup_seconds is not None and proxy.removal_seconds is not None
        starts.append(proxy.startup_seconds)
        stops.append(proxy.removal_seconds)
    with capsys.disabled():
        print(
            f"\negress proxy start-up: median {sorted(starts)[1]:.2f} s, max {max(starts):.2f} s; "
            f"removal median {sorted(stops)[1]:.2f} s (3 runs)"
        )


@pytest.mark.docker
@pytest.mark.claude
def test_real_claude_in_a_network_none_container_talks_to_the_api_through_the_proxy(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claude CLI honours ANTHROPIC_BASE_URL past the proxy variables (NO_PROXY), sends
    the placeholder, and the API (the fake) gets the real key; its tool call reaches an
    allowed host through the forward proxy."""
    from fks_testing import fakeapi
    from fks_testing.fakeapi import FakeAnthropic

    monkeypatch.setattr(fakeapi, "SECRET_HEADERS", frozenset())  # here the key is the point
    command = f"curl -s -o /dev/null -w 'code=%{{http_code}}' http://{lab.gateway}:{lab.allowed.port}/from-claude"
    turns = [
        [
            [{"tool": "Bash", "input": {"command": command, "description": "fetch"}}],
            [{"text": "Done.\nFORKHESTRA_COMPLETE"}],
        ]
    ]
    with FakeAnthropic({"conversations": turns}, host=lab.gateway) as fake:
        api = ApiUpstream(fake.url, REAL_KEY)
        argv = "claude -p go --output-format stream-json --verbose --max-turns 3"
        with lab.proxy(api=api) as proxy:
            code, output = lab.agent(proxy, f"{argv} --dangerously-skip-permissions")
    assert code == 0, output[-3000:]
    assert '"subtype":"success"' in output
    main = fake.main_requests()
    assert main, "the fake API got no request"
    for request in main:
        keys = [v for k, v in request.headers.items() if k.lower() == "x-api-key"]
        assert keys == [REAL_KEY]
    assert any(seen["path"] == "/from-claude" for seen in lab.allowed.seen)
    assert REAL_KEY not in output


def test_refusals_taken_apart_add_up_as_one_take_lists_them() -> None:
    early = Refusals((Denied("a.test", 443, 2), Denied("b.test", 80, 1)), more=5)
    late = Refusals(
        (Denied("b.test", 80, 2), *(Denied(f"h{i}.test", 443, 1) for i in range(30))), 1
    )
    both = early.plus(late)
    assert both.listed[:2] == (Denied("b.test", 80, 3), Denied("a.test", 443, 2))
    assert len(both.listed) == 20
    assert sum(d.count for d in both.listed) + both.more == 3 + 5 + 32 + 1
    assert Refusals().plus(Refusals()) == Refusals()


# --- what the API port passes on, against an upstream that reflects requests -------------------

MARKER = "fks-probe-" + uuid.uuid4().hex


class _ReflectingHandler(http.server.BaseHTTPRequestHandler):
    """An API on the paths of the calls it answers (with nothing of the request), and
    everywhere else, with any method, the request as it came: line, headers and body, like
    TRACE, an echo endpoint or a debugging gateway. `{"fail": "close"|"garbage"}` as a
    message's body: no answer or a malformed one (the proxy's own error page)."""

    server: _ReflectingServer
    protocol_version = "HTTP/1.1"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._answer
        raise AttributeError(name)

    def _answer(self) -> None:
        body = self._body()
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        route = (self.command, self.path.split("?", 1)[0])
        if route == ("POST", "/v1/messages") and b'"fail"' in body:
            if b'"garbage"' in body:
                self.wfile.write(b"HTTP/1.1 2OO OK\r\nno header here\r\n\r\n")
            self.close_connection = True
            return
        if route in (("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens")):
            answer = json.dumps({"type": "message", "content": [{"type": "text", "text": "hi"}]})
        elif route == ("GET", "/v1/models"):
            answer = json.dumps({"data": [{"id": "claude-test"}]})
        else:
            answer = f"{self.requestline}\r\n{self.headers}\r\n{body.decode()}"
        payload = answer.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _body(self) -> bytes:
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b""
        while size := int(self.rfile.readline().split(b";")[0], 16):
            body += self.rfile.read(size + 2)[:-2]
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return body

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ReflectingServer(http.server.ThreadingHTTPServer):
    def __init__(self, host: str) -> None:
        super().__init__((host, 0), _ReflectingHandler)
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


# Sends each request on its own connection to the API port and prints what came back, base64.
_RAW_CLIENT = """
import base64, json, socket, sys
for name, raw in json.loads(base64.b64decode(sys.argv[1])):
    got = b""
    with socket.create_connection(("127.0.0.1", API_PORT), timeout=20) as s:
        s.sendall(raw.encode("latin-1"))
        try:
            while chunk := s.recv(65536):
                got += chunk
        except OSError:
            pass
    print("got", name, base64.b64encode(got).decode())
""".replace("API_PORT", str(API_PORT))


def _raw(method: str, target: str, body: str = "", host: str = f"127.0.0.1:{API_PORT}") -> str:
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nx-api-key: {PLACEHOLDER}\r\n"
        f"Authorization: Bearer {PLACEHOLDER}\r\nX-Probe: {MARKER}\r\nConnection: close\r\n"
    )
    if body or method in ("POST", "PUT", "PATCH"):
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return f"{head}\r\n{body}"


def _smuggle(framing: str) -> str:
    """A message whose body, read as chunked, ends before a TRACE to an echo path."""
    hidden = f"TRACE /echo HTTP/1.1\r\nHost: x\r\nX-Probe: {MARKER}\r\nConnection: close\r\n\r\n"
    return (
        f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{API_PORT}\r\n{framing}\r\n"
        f"Content-Type: application/json\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n{hidden}"
    )


def _status(response: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", response)
    return int(match.group(1)) if match else 0


@pytest.mark.docker
@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_the_api_port_passes_only_api_calls_and_never_returns_the_key(
    lab: Lab, header: Literal["x-api-key", "authorization"]
) -> None:
    """Whatever an agent sends to the API port, through a proxy to an upstream that reflects
    every other request, no byte it gets back holds the key: other methods, paths and URI
    forms are refused (403) before the key is added, and the proxy's error pages show
    nothing of the request. The API's calls still work, with the key and the API's Host."""
    upstream = _ReflectingServer(lab.gateway)
    origin = f"{lab.gateway}:{upstream.port}"
    message = '{"model": "m", "max_tokens": 1, "messages": []}'
    refused = {
        "trace": _raw("TRACE", "/"),
        "trace-api": _raw("TRACE", "/v1/messages?beta=true").replace(
            "Connection:", "Max-Forwards: 0\r\nConnection:"
        ),
        "put": _raw("PUT", "/v1/messages", message),
        "delete": _raw("DELETE", "/v1/messages"),
        "options": _raw("OPTIONS", "/v1/messages"),
        "patch": _raw("PATCH", "/v1/messages", message),
        "propfind": _raw("PROPFIND", "/v1/messages"),
        "connect": _raw("CONNECT", origin, host=origin),
        "connect-self": _raw("CONNECT", f"127.0.0.1:{API_PORT}"),
        "get-echo": _raw("GET", "/echo"),
        "get-root": _raw("GET", "/"),
        "get-messages": _raw("GET", "/v1/messages"),
        "head-echo": _raw("HEAD", "/echo"),
        "post-echo": _raw("POST", "/echo", message),
        "dot-dot": _raw("POST", "/v1/messages/../echo", message),
        "encoded-dot-dot": _raw("POST", "/v1/messages/%2e%2e/echo", message),
        "models-dot-dot": _raw("GET", "/v1/models/../../echo"),
        "query": _raw("POST", "/v1/messages?echo=1", message),
        "upper-case": _raw("POST", "/V1/MESSAGES", message),
        "double-slash": _raw("POST", "//v1/messages", message),
        "absolute-echo": _raw("POST", f"http://{origin}/echo", message),
        "absolute-other": _raw("GET", "http://denied.test/echo", host="denied.test"),
        "absolute-https": _raw("POST", "https://api.test/v1/messages/../echo", message),
        "manager": _raw("GET", "/squid-internal-mgr/config"),
        "http-1.0": _raw("GET", "/echo").replace("HTTP/1.1", "HTTP/1.0"),
        "options-star": _raw("OPTIONS", "*"),
    }
    passed = {
        "message": _raw("POST", "/v1/messages?beta=true", message),
        "count": _raw("POST", "/v1/messages/count_tokens?beta=true", message),
        "models": _raw("GET", "/v1/models?limit=1000"),
        "warm-up": _raw("HEAD", "/"),
        "other-host": _raw("POST", "/v1/messages", message, host="denied.test"),
        "absolute": _raw("POST", "http://denied.test/v1/messages", message, host="denied.test"),
        "no-answer": _raw("POST", "/v1/messages", '{"fail": "close"}'),
        "bad-answer": _raw("POST", "/v1/messages", '{"fail": "garbage"}'),
        # Request smuggling: what follows the body Squid reads must not reach the API as a
        # request of its own.
        "cl-te": _smuggle("Content-Length: 40\r\nTransfer-Encoding: chunked"),
        "te-cl": _smuggle("Transfer-Encoding: chunked\r\nContent-Length: 4"),
        "te-te": _smuggle("Transfer-Encoding: chunked\r\nTransfer-Encoding: x"),
        "te-space": _smuggle("Transfer-Encoding : chunked\r\nContent-Length: 4"),
        "te-xchunked": _smuggle("Transfer-Encoding: xchunked\r\nContent-Length: 4"),
    }
    requests = base64.b64encode(json.dumps(list({**refused, **passed}.items())).encode()).decode()
    script = f"python3 -c {shlex.quote(_RAW_CLIENT)} {requests}"
    bearer = header == "authorization"
    secret = REAL_TOKEN if bearer else REAL_KEY
    variable = "CLAUDE_CODE_OAUTH_TOKEN" if bearer else "ANTHROPIC_API_KEY"
    try:
        with lab.proxy(api=ApiUpstream(f"http://{origin}", secret, header, variable)) as proxy:
            code, output = lab.agent(proxy, script)
    finally:
        upstream.shutdown()
    assert code == 0, output
    got = {
        name: base64.b64decode(answer)
        for _, name, answer in (
            line.split() for line in output.splitlines() if line.startswith("got ")
        )
    }
    assert got.keys() == refused.keys() | passed.keys(), output
    for name, response in got.items():
        assert secret.encode() not in response, name
        assert MARKER.encode() not in response, name  # nothing of the request comes back
    statuses = {name: _status(got[name]) for name in refused}
    # Squid's accelerator answers a CONNECT itself (405), before any access rule.
    assert statuses == {**dict.fromkeys(refused, 403), "connect": 405, "connect-self": 405}
    assert got["trace"].endswith(
        b"\r\n\r\nfks egress proxy: ERR_ACCESS_DENIED: refused; only "
        b"the run's allowed hosts (sandbox.allow, --allow) and the model "
        b"API's calls go through\n"
    )
    statuses = {name: _status(got[name]) for name in passed}
    assert statuses == {
        **dict.fromkeys(passed, 200),
        "no-answer": 502,
        "bad-answer": 502,
        "te-te": 501,
        "te-space": 400,
        "te-xchunked": 501,
    }
    assert b'"text": "hi"' in got["message"]
    paths = [(method, path) for method, path, _ in upstream.seen]
    assert paths == [
        ("POST", "/v1/messages?beta=true"),
        ("POST", "/v1/messages/count_tokens?beta=true"),
        ("GET", "/v1/models?limit=1000"),
        ("HEAD", "/"),
        *[("POST", "/v1/messages")] * 6,  # of the smuggling ones, only the first message
    ]
    for method, _path, headers in upstream.seen:
        keys = [v.removeprefix("Bearer ") for k, v in headers.items() if k.lower() == header]
        assert keys == ([] if method == "HEAD" else [secret])
        assert headers["Host"] == origin  # the API's, whatever the agent named
