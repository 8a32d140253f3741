"""A hostile agent against secrets by destination, at the proxy: every trick it could try
inside the proxy's TLS tunnel to a secret's destination (other hosts' names, smuggling, its
own header of the secret's name, HTTP/2 and upgrades, an inner CONNECT, Squid's own URLs),
wildcards, the deny list, origins' certificates, and fks's records of refusals. Each test is
an attack; those that pass prove the guarantee holds against it."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fks_testing.containers import run_behind_proxy
from fks_testing.origins import HttpsOrigin, Request

from sandbox_runner.backends.docker.egress.access_log import access_line
from sandbox_runner.backends.docker.egress.proxy import SETTLE_S, EgressProxy
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import SandboxError
from sandbox_runner.images import lookup as images
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.secrets import SecretEntry, resolve_secrets

pytestmark = pytest.mark.docker

TOKEN = "sk-REAL-" + uuid.uuid4().hex
OTHER_TOKEN = "sk-OTHER-" + uuid.uuid4().hex
NAMES = ("origin.test", "other.test", "a.wild.test", "wild.test")
CLOSED = "nothing.test"
"""A name the proxy resolves to an address where nothing listens on the origin's port."""


@dataclass
class Lab:
    client: Any
    network: str
    gateway: str
    origin: HttpsOrigin

    @property
    def port(self) -> int:
        return self.origin.port

    def proxy(
        self,
        entries: Sequence[SecretEntry] | None = None,
        *,
        allow: tuple[str, ...] = (),
        deny: tuple[str, ...] = (),
        hosts: dict[str, str] | None = None,
        trust: bool = True,
    ) -> EgressProxy:
        """A proxy with `entries` (default: TOKEN for origin.test on the origin's port, GET and
        POST); FKS_TEST_SECRET holds TOKEN, FKS_OTHER_SECRET OTHER_TOKEN."""
        if entries is None:
            entries = [
                SecretEntry(
                    host=f"origin.test:{self.port}", env="FKS_TEST_SECRET", methods=("GET", "POST")
                )
            ]
        environ = {"FKS_TEST_SECRET": TOKEN, "FKS_OTHER_SECRET": OTHER_TOKEN}
        return EgressProxy(
            self.client,
            run_id=f"secrets-attack-{uuid.uuid4().hex[:8]}",
            allow=[AllowEntry.parse(a) for a in allow],
            deny=[AllowEntry.parse(d) for d in deny],
            secrets=resolve_secrets(entries, environ, Path("/")),
            origin_cas=self.origin.ca_pem.decode() if trust else "",
            labels={"fks.test": "secrets-attacks"},
            network=self.network,
            extra_hosts=dict.fromkeys(NAMES, self.gateway) | {CLOSED: "127.0.0.1"} | (hosts or {}),
        )

    def agent(self, proxy: EgressProxy, script: str) -> tuple[int, str]:
        """`script` as the sandbox runs an agent (production's settings: any uid, no network,
        the proxy's sockets)."""
        ran = run_behind_proxy(
            self.client, proxy, script, labels={"fks.test": "secrets-attacks"}, timeout=120
        )
        return ran.code, ran.output

    def seen(self, before: int) -> list[Request]:
        return self.origin.requests[before:]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    client = docker_client()
    for image in (images.DEFAULT_PROXY_IMAGE, images.DEFAULT_AGENT_IMAGE):
        try:
            images.require_image(client, image)
        except SandboxError as exc:
            pytest.fail(f"{exc} (scripts/build-images makes it)")
    network = client.networks.create(
        f"fks-secrets-attack-{uuid.uuid4().hex[:8]}",
        driver="bridge",
        labels={"fks.test": "secrets-attacks"},
    )
    try:
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        with HttpsOrigin(NAMES, value=f"Bearer {TOKEN}", bind=gateway) as origin:
            yield Lab(client, network.name, gateway, origin)
    finally:
        network.remove()


def holding(requests: Sequence[Request], token: str) -> list[Request]:
    return [r for r in requests if token in json.dumps(r.headers) or token.encode() in r.body]


RAW_CLIENT = r"""
import ast, os, socket, ssl, sys
target, sni, payload, wanted = sys.argv[1], sys.argv[2], ast.literal_eval(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
answer = b""
while b"\r\n\r\n" not in answer and len(answer) < 65536:
    chunk = s.recv(1)
    if not chunk:
        break
    answer += chunk
if not answer.startswith(b"HTTP/1.1 200"):
    sys.exit("refused: " + answer.decode("latin-1").splitlines()[0])
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
if os.environ.get("ALPN"):
    ctx.set_alpn_protocols(os.environ["ALPN"].split(","))
t = ctx.wrap_socket(s, server_hostname=sni)
print(f"alpn={t.selected_alpn_protocol()}")
t.sendall(payload)
t.settimeout(120)
buf, out, done = b"", [], 0


def more():
    global buf
    chunk = t.recv(65536)
    if not chunk:
        raise EOFError
    buf += chunk


# `wanted` final answers (each read to its Content-Length), or what comes until the end.
try:
    while done < wanted:
        while b"\r\n\r\n" not in buf:
            more()
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(buf) < length:
            more()
        out.append(head.decode("latin-1") + "\n\n" + buf[:length].decode("latin-1"))
        buf = buf[length:]
        done += int(lines[0].split()[1]) >= 101
except (EOFError, OSError, ssl.SSLError, ValueError, IndexError) as exc:
    out.append(f"[{type(exc).__name__}]")
print("\n".join(out))
"""


def raw(target: str, *requests: bytes, alpn: str = "", answers: int = 0) -> str:
    """Shell lines: `requests` sent as they are, one after the other on one connection, inside
    a TLS tunnel to `target` through the proxy; the answers printed, as many as `answers`
    (default one per request) or until the connection ends."""
    env = f"ALPN={alpn} " if alpn else ""
    quoted = repr(b"".join(requests)).replace("'", "'\\''")
    name = target.rsplit(":", 1)[0]
    return f"{env}python3 /tmp/raw.py {target} {name} '{quoted}' {answers or len(requests)}\n"


def request(
    target: str,
    host: str,
    *headers: str,
    method: str = "GET",
    close: bool = True,
    end: str = "\r\n",
) -> bytes:
    """One HTTP/1.1 request for `target` (a path or an absolute URL) with `Host: host`."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", *headers]
    lines += ["Connection: close"] if close else []
    return (end.join(lines) + end + end).encode()


def attack(*parts: str) -> str:
    """The raw client written into the container, then `parts` (shell lines)."""
    return f"cat > /tmp/raw.py <<'EOF'\n{RAW_CLIENT}\nEOF\n" + "".join(parts)


def only_the_secret(seen: Sequence[Request], header: str, value: str) -> None:
    """Every request the origin got carried exactly one `header`, the secret's value, and
    named the origin's host."""
    assert seen
    for r in seen:
        assert r.header(header) == [value], r


def test_a_request_in_the_tunnel_reaches_the_secrets_host_only(lab: Lab) -> None:
    """Inside the tunnel to the secret's host the agent names other hosts (absolute-form,
    `Host`, both at once, two `Host` headers, %-encoded, pipelined, a CONNECT): those the
    allow-list refuses get 403, those the origin's certificate is not for get an error, and
    what reaches the origin names the secret's host, with the secret."""
    p, o = lab.port, f"origin.test:{lab.port}"
    wild, closed = f"wild.test:{p}", f"{CLOSED}:{p}"  # on the origin's certificate / not
    before = len(lab.origin.requests)
    script = attack(
        raw(o, request(f"https://{wild}/v1/models", wild)),
        raw(o, request("/v1/models", wild)),
        raw(o, request("/v1/models", wild.upper() + ".")),
        raw(o, request(f"https://{closed}/v1/models", closed)),
        raw(o, request("/v1/models", closed)),
        raw(o, request(f"https://{o}/v1/models", "evil.example")),
        raw(o, request("/v1/models", o, f"Host: {wild}")),
        raw(o, request(f"https://%77ild.test:{p}/v1/models", f"%77ild.test:{p}")),
        raw(o, request("/v1/models", o, close=False), request("/v1/models", wild)),
        raw(o, request(wild, wild, method="CONNECT", close=False)),
        raw(o, request("/v1/models", o)),
    )
    with lab.proxy() as proxy:
        code, out = lab.agent(proxy, script)
    assert code == 0, out
    assert TOKEN not in out
    assert out.count("fks egress proxy: ERR_ACCESS_DENIED") >= 5, out
    seen = lab.seen(before)
    assert {r.host for r in seen} == {o}, seen
    only_the_secret(seen, "Authorization", f"Bearer {TOKEN}")


def test_another_secret_never_rides_this_secrets_connection(lab: Lab) -> None:
    """Two secrets; in the tunnel to the first one's host the agent names the second's host
    (which the origin's certificate is not for): the second secret goes nowhere but its own
    destination (here unreachable), never over the first one's connection."""
    p, o, closed = lab.port, f"origin.test:{lab.port}", f"{CLOSED}:{lab.port}"
    secrets = [
        SecretEntry(host=o, env="FKS_TEST_SECRET"),
        SecretEntry(host=closed, env="FKS_OTHER_SECRET", header="X-Other", scheme="raw"),
    ]
    before = len(lab.origin.requests)
    script = attack(
        raw(o, request("/echo", closed)),
        raw(o, request(f"https://{closed}/echo", closed)),
        raw(o, request(f"https://{closed}/echo", o)),
        raw(o, request("/echo", o, close=False), request("/echo", closed)),
        f"curl -sS -H 'Host: {closed}' https://{o}/echo\n",
        f"curl -sS --connect-to {CLOSED}:{p}:origin.test:{p} https://{closed}/echo\n",
    )
    with lab.proxy(secrets) as proxy:
        _code, out = lab.agent(proxy, script)
    assert OTHER_TOKEN not in out, out
    assert holding(lab.seen(before), OTHER_TOKEN) == []
    assert TOKEN in out  # the /echo the first secret's own requests got (an echoing origin)


def test_the_agents_own_header_of_the_secrets_name_never_passes(lab: Lab) -> None:
    """The agent sends the secret's header in every spelling (case, repeats, a folded line, a
    space or tab before the colon, named in `Connection`): the origin gets exactly one, the
    secret's."""
    o = f"origin.test:{lab.port}"
    secrets = [SecretEntry(host=o, env="FKS_TEST_SECRET", header="X-Token", scheme="raw")]
    before = len(lab.origin.requests)
    script = attack(
        raw(o, request("/v1/models", o, "x-token: mine", "X-TOKEN: mine", "X-Token: mine")),
        raw(o, request("/v1/models", o, "X-A: a", " X-Token: mine")),
        raw(o, request("/v1/models", o, "X-Token : mine")),
        raw(o, request("/v1/models", o, "X-Token\t: mine")),
        raw(
            o, request("/v1/models", o, "X-Token: mine", "Connection: close, X-Token", close=False)
        ),
        raw(o, request("/v1/models", o, "X-Token: mine", end="\n")),
    )
    with lab.proxy(secrets) as proxy:
        code, out = lab.agent(proxy, script)
    assert code == 0, out
    seen = lab.seen(before)
    assert len(seen) >= 4, out  # the rest refused by the proxy as malformed
    only_the_secret(seen, "X-Token", TOKEN)


def test_smuggled_requests_are_reframed_and_checked(lab: Lab) -> None:
    """Framings a proxy and an origin could read differently (Content-Length with chunked,
    two lengths, an odd Transfer-Encoding, bare LF), each hiding a TRACE in its body: the
    origin only ever parses requests the proxy checked, each with the secret."""
    o = f"origin.test:{lab.port}"
    hidden = request("/echo", o, method="TRACE")
    n, last_chunk = len(hidden), b"0\r\n\r\n"
    # (the POST's framing headers, what follows them: a body hiding the TRACE, or not, ...)
    framings: list[tuple[tuple[str, ...], bytes, str]] = [
        (("Content-Length: 5", "Transfer-Encoding: chunked"), last_chunk + hidden, "\r\n"),
        (("Transfer-Encoding: chunked", f"Content-Length: {n + 5}"), last_chunk + hidden, "\r\n"),
        (("Content-Length: 0", f"Content-Length: {n}"), hidden, "\r\n"),
        (("Transfer-Encoding: chunked, identity",), last_chunk + hidden, "\r\n"),
        (("Transfer-Encoding: xchunked", f"Content-Length: {n}"), hidden, "\r\n"),
        (("Transfer-Encoding:\tchunked", f"Content-Length: {n}"), hidden, "\r\n"),
        ((f"Content-Length: {n}",), hidden, "\n"),
    ]
    before = len(lab.origin.requests)
    script = attack(
        *(
            raw(o, request("/v1/models", o, *headers, method="POST", end=end) + rest)
            for headers, rest, end in framings
        )
    )
    with lab.proxy() as proxy:
        _code, out = lab.agent(proxy, script)
    assert TOKEN not in out
    seen = lab.seen(before)
    assert {r.method for r in seen} <= {"GET", "POST"}, seen
    only_the_secret(seen, "Authorization", f"Bearer {TOKEN}")


def test_no_http2_or_upgrade_past_the_proxy(lab: Lab) -> None:
    """HTTP/2 offered by ALPN, its preface, h2c and WebSocket upgrades: the proxy speaks
    HTTP/1.1 only and never passes an upgrade, so every request it forwards is one it
    checked and added the secret to."""
    o = f"origin.test:{lab.port}"
    before = len(lab.origin.requests)
    script = attack(
        raw(o, request("/v1/models", o), alpn="h2,http/1.1"),
        raw(o, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", alpn="h2"),
        raw(
            o,
            request(
                "/v1/models",
                o,
                "Upgrade: h2c",
                "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
                "Connection: Upgrade, HTTP2-Settings",
                close=False,
            ),
        ),
        raw(
            o,
            request(
                "/v1/models",
                o,
                "Upgrade: websocket",
                "Sec-WebSocket-Version: 13",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Connection: Upgrade",
                close=False,
            ),
        ),
    )
    with lab.proxy() as proxy:
        _code, out = lab.agent(proxy, script)
    assert ("alpn=h2" not in out and "alpn=http/1.1" in out) or "alpn=None" in out, out
    assert " 101 " not in out
    seen = lab.seen(before)
    assert all(r.header("Upgrade") == [] and r.method != "PRI" for r in seen), seen
    only_the_secret(seen, "Authorization", f"Bearer {TOKEN}")


def test_a_connect_inside_the_tunnel_cannot_pass_other_methods(lab: Lab) -> None:
    """A CONNECT sent inside the TLS tunnel to the secret's host would open a raw tunnel over
    the proxy's own connection to it: TRACE and methods its entry does not take would reach
    the destination unchecked. The proxy refuses it."""
    o = f"origin.test:{lab.port}"
    before = len(lab.origin.requests)
    script = attack(
        raw(o, request(o, o, method="CONNECT", close=False), request("/echo", o, method="TRACE")),
        raw(
            o,
            request("/v1/models", o, close=False),
            request(o, o, method="CONNECT", close=False),
            request("/v1/models", o, method="PROPFIND"),
        ),
    )
    with lab.proxy() as proxy:
        _code, out = lab.agent(proxy, script)
    assert out.count("fks egress proxy: ERR_ACCESS_DENIED") == 2, out
    seen = lab.seen(before)
    assert {r.method for r in seen} <= {"GET", "POST"}, seen
    only_the_secret(seen, "Authorization", f"Bearer {TOKEN}")


def test_squids_own_urls_in_the_tunnel_show_nothing(lab: Lab) -> None:
    """The cache manager and Squid's internal URLs, asked for inside the tunnel (on the
    secret's host and on Squid's own name): nothing of the proxy's config comes back."""
    o = f"origin.test:{lab.port}"
    script = attack(
        raw(o, request("/squid-internal-mgr/config", o)),
        raw(o, request("http://fks-proxy:3128/squid-internal-mgr/config", "fks-proxy:3128")),
        raw(o, request("/squid-internal-mgr/config", "fks-proxy:3128")),
        raw(o, request("cache_object://localhost/config", "localhost")),
        raw(o, request("/squid-internal-static/icons/SN.png", o)),
        raw(o, request("/squid-internal-periodic/store_digest", o)),
    )
    with lab.proxy() as proxy:
        _code, out = lab.agent(proxy, script)
    assert TOKEN not in out
    for config_text in ("request_header_add", "http_access", "ssl_bump", "fks_s1"):
        assert config_text not in out, out


def test_deny_wins_over_a_secrets_destination(lab: Lab) -> None:
    o = f"origin.test:{lab.port}"
    before = len(lab.origin.requests)
    script = attack(raw(o, request("/v1/models", o)), f"curl -sS https://{o}/v1/models\n")
    with lab.proxy(deny=("origin.test",)) as proxy:
        _code, out = lab.agent(proxy, script)
    # Refused either at the CONNECT or, its TLS ended by the proxy, inside it.
    assert out.count("fks egress proxy: ERR_ACCESS_DENIED") == 2, out
    assert lab.seen(before) == []


def test_hostile_names_reach_the_refusals_escaped(lab: Lab) -> None:
    """Refused hosts are the agent's words shown to the user: markup, quotes, bidi and
    terminal controls come out %-escaped (or the request is refused as malformed)."""
    names = ("a<b>c.test", 'q"x.test', "\u202eevil.test", "x\x1b[31m.test", "plain.test")
    lines = "".join(
        f"s = socket.create_connection(('127.0.0.1', 3128)); "
        f"s.sendall({request(f'http://{n}/', 'x')!r}); s.recv(4096); s.close()\n"
        for n in names
    ).replace("\\u202e", "\\xe2\\x80\\xae")
    script = f"python3 - <<'EOF'\nimport socket\n{lines}EOF\n"
    with lab.proxy() as proxy:
        code, out = lab.agent(proxy, script)
        refused = proxy.take_denied(settled_at=time.time() + SETTLE_S)
    assert code == 0, out
    hosts = {d.host for d in refused.listed}
    assert "plain.test" in hosts and len(hosts) >= 3, refused
    for host in hosts:
        assert re.fullmatch(r"[A-Za-z0-9.%_-]+", host), host


def test_refusals_the_agent_hangs_up_on_are_recorded(lab: Lab) -> None:
    """An agent that closes its connection right after asking must not hide the refusal. Squid
    logs such a request as aborted only if the agent hung up before its answer went out: the
    attack is made again (new names each time) until it did, five times at most. Every refusal
    Squid logged is recorded (a request the agent dropped before Squid read it is none)."""
    hosts: set[str] = set()
    wanted: set[str] = set()
    aborted = False
    with lab.proxy() as proxy:
        for round_ in range(5):
            names = [f"hidden{round_}-{n}.test" for n in range(10)]
            script = (
                "python3 - <<'EOF'\nimport socket\n"
                f"for name in {names!r}:\n"
                "    s = socket.create_connection(('127.0.0.1', 3128))\n"
                "    s.sendall(f'GET http://{name}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'.encode())\n"
                "    s.close()\nEOF\n"
            )
            lab.agent(proxy, script)
            logged = _logged_refusals(proxy, f"hidden{round_}-")
            wanted |= {found.host for line in logged if (found := access_line(line)) is not None}
            deadline = time.monotonic() + 30  # the proxy reads its log a moment behind (a busy CI)
            while not wanted <= hosts and time.monotonic() < deadline:
                refused = proxy.take_denied(settled_at=time.time() + SETTLE_S)
                hosts |= {d.host for d in refused.listed}
            aborted = any("_ABORTED/" in line for line in logged)
            if aborted:
                break
    assert aborted, "every answer went out before the agent hung up, five times"
    assert len(wanted) >= 5 and hosts == wanted, (hosts, wanted)


def _logged_refusals(proxy: EgressProxy, prefix: str) -> list[str]:
    """The proxy's access-log lines of refusals of hosts named `prefix…`, once all ten are
    there."""
    deadline = time.monotonic() + 30
    while True:
        logs = proxy._container.logs(stdout=True, stderr=False).decode(errors="replace")
        found = [line for line in logs.splitlines() if " TCP_DENIED" in line and prefix in line]
        if len(found) >= 10 or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_no_secret_to_an_origin_whose_certificate_is_for_other_names(lab: Lab) -> None:
    """The secret's name leads to an origin the proxy trusts (its CA is in caCerts) but whose
    certificate is not for that name: through the tunnel or as an https:// URL asked of the
    proxy in clear, the secret never leaves the proxy."""
    p, unlisted = lab.port, f"unlisted.test:{lab.port}"
    secrets = [SecretEntry(host=unlisted, env="FKS_TEST_SECRET")]
    before = len(lab.origin.requests)
    script = attack(
        f"curl -sS https://{unlisted}/v1/models; echo\n",
        raw(unlisted, request("/v1/models", unlisted)),
        f"curl -sS -x http://127.0.0.1:3128 --request-target https://{unlisted}/v1/models "
        f"http://{unlisted}/; echo\n",
        f"curl -sS -x http://127.0.0.1:3128 --request-target https://origin.test:{p}/v1/models "
        f"http://origin.test:{p}/; echo\n",
    )
    with lab.proxy(
        secrets, allow=(f"origin.test:{p}",), hosts={"unlisted.test": lab.gateway}
    ) as proxy:
        _code, out = lab.agent(proxy, script)
    assert "ERR_SECURE_CONNECT_FAIL" in out, out
    assert holding(lab.seen(before), TOKEN) == []
    assert [r.host for r in lab.seen(before)] == [f"origin.test:{p}"]  # allowed, no secret


def test_a_wildcard_secret_reaches_its_subdomains_only(lab: Lab) -> None:
    """`*.wild.test`: the domain itself, a longer name that only starts like a subdomain,
    a name with `_`, the address, the name in capitals with a trailing dot: the secret goes to
    a subdomain's origin under the subdomain's name, nowhere else."""
    p = lab.port
    secrets = [SecretEntry(host=f"*.wild.test:{p}", env="FKS_TEST_SECRET")]
    names = ("a.wild.test", "A.WILD.TEST.", "wild.test", "a.wild.test.evil.test", "_x.wild.test")
    script = "".join(
        f"echo \"{n}=$(curl -sS -o /dev/null -w '%{{http_code}}' https://{n}:{p}/v1/models)\"\n"
        for n in (*names, lab.gateway)
    ) + (
        f"echo \"connect-to=$(curl -sS -o /dev/null -w '%{{http_code}}' "
        f'--connect-to a.wild.test:{p}:{lab.gateway}:{p} https://a.wild.test:{p}/v1/models)"\n'
    )
    hosts = dict.fromkeys(("a.wild.test.evil.test", "_x.wild.test"), lab.gateway)
    before = len(lab.origin.requests)
    with lab.proxy(secrets, hosts=hosts) as proxy:
        _code, out = lab.agent(proxy, script)
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert found["a.wild.test"] == "200", out
    for refused in ("wild.test", "a.wild.test.evil.test", lab.gateway, "connect-to"):
        assert found[refused] in ("000", "403"), out
    assert found["_x.wild.test"] != "200", out
    seen = lab.seen(before)
    assert {r.host for r in seen} == {f"a.wild.test:{p}"}, seen
    only_the_secret(seen, "Authorization", f"Bearer {TOKEN}")
