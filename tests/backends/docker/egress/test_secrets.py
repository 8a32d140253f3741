"""Secrets by destination against the real engine, offline: a local HTTPS origin with its own
CA that answers 200 only with the real token, reached by the agent's plain curl through the
proxy, which ends TLS for it, adds the token and verifies the origin; and every way an agent
could try to get the token back."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fks_testing.containers import run_behind_proxy
from fks_testing.origins import HttpsOrigin
from fks_testing.sandboxed import RUNTIMES

from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import SandboxError
from sandbox_runner.images import lookup as images
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.secrets import PLACEHOLDER, SecretEntry, resolve_secrets
from sandbox_runner.results.reported import RequestsRecord

pytestmark = pytest.mark.docker

NAMES = ("origin.test", "other.test", "a.wild.test", "b.c.wild.test", "wild.test", "wildx.test")
TOKEN = "sk-REAL-" + uuid.uuid4().hex


@dataclass
class Lab:
    client: Any
    network: str
    gateway: str
    origin: HttpsOrigin
    second: HttpsOrigin
    """Another origin on another port, same names: the secret's host on a port without it."""

    def proxy(
        self, *, allow: tuple[str, ...] = (), deny: tuple[str, ...] = (), trust: bool = True
    ) -> EgressProxy:
        entry = SecretEntry(
            host=f"origin.test:{self.origin.port}", env="FKS_TEST_SECRET", methods=("GET", "POST")
        )
        secrets = resolve_secrets([entry], {"FKS_TEST_SECRET": TOKEN}, Path("/"))
        cas = (self.origin.ca_pem + self.second.ca_pem).decode()
        return EgressProxy(
            self.client,
            run_id=f"secrets-test-{uuid.uuid4().hex[:8]}",
            allow=[AllowEntry.parse(a) for a in allow],
            deny=[AllowEntry.parse(d) for d in deny],
            secrets=secrets,
            origin_cas=cas if trust else "",
            labels={"fks.test": "secrets"},
            network=self.network,
            extra_hosts=dict.fromkeys(NAMES, self.gateway),
        )

    def agent(self, proxy: EgressProxy, script: str, runtime: str = "runc") -> tuple[int, str, str]:
        """`script` as the sandbox runs an agent (production's settings, under `runtime`);
        (exit code, output, `docker inspect` of the agent's and the proxy's containers while
        they exist)."""
        ran = run_behind_proxy(
            self.client, proxy, script, labels={"fks.test": "secrets"}, runtime=runtime, timeout=90
        )
        inspected = json.dumps([ran.inspected, self.client.api.inspect_container(proxy_id(proxy))])
        return ran.code, ran.output, inspected


def proxy_id(proxy: EgressProxy) -> str:
    return str(proxy._container.id)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    client = docker_client()
    for image in (images.DEFAULT_PROXY_IMAGE, images.DEFAULT_AGENT_IMAGE):
        try:
            images.require_image(client, image)
        except SandboxError as exc:
            pytest.fail(f"{exc} (scripts/build-images makes it)")
    network = client.networks.create(
        f"fks-secrets-test-{uuid.uuid4().hex[:8]}", driver="bridge", labels={"fks.test": "secrets"}
    )
    try:
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        with (
            HttpsOrigin(NAMES, value=f"Bearer {TOKEN}", bind=gateway) as origin,
            HttpsOrigin(NAMES, value=f"Bearer {TOKEN}", bind=gateway) as second,
        ):
            yield Lab(client, network.name, gateway, origin, second)
    finally:
        network.remove()


def lines(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_plain_curl_gets_200_with_the_real_token_it_never_holds(lab: Lab, runtime: str) -> None:
    port = lab.origin.port
    before = len(lab.origin.requests)
    script = f"""
code=$(curl -sS -o /dev/null -w '%{{http_code}}' https://origin.test:{port}/v1/models)
echo "with-secret=$code"
code=$(curl -sS -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer mine' \
  https://origin.test:{port}/v1/models)
echo "agent-header-replaced=$code"
echo "placeholder=$FKS_TEST_SECRET"
echo "--- what the agent can see"
env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'
find /tmp /home /fks-proxy /workspace /etc -xdev -type f -size -2M -readable \
  -exec cat {{}} + 2>/dev/null
"""
    with lab.proxy() as proxy:
        code, out, inspected = lab.agent(proxy, script, runtime)
        rows = audited(proxy, {"GET"})
    assert code == 0, out
    # The audit says the proxy added the secret to both, naming its destination only.
    assert sum(r.count for r in rows if r.secret == f"origin.test:{port}") == 2, rows
    found = lines(out)
    assert found["with-secret"] == "200" and found["agent-header-replaced"] == "200", out
    # The agent holds a placeholder; env, /proc, its files and docker inspect never the token.
    assert found["placeholder"] == PLACEHOLDER
    assert TOKEN not in out and TOKEN not in inspected
    assert "BEGIN CERTIFICATE" in out  # it did read the files it could (the run's CA among them)
    assert "PRIVATE KEY" not in out  # never the CA's key
    seen = lab.origin.requests[before:]
    assert [r.header("Authorization") for r in seen] == [[f"Bearer {TOKEN}"]] * 2


def test_a_client_that_does_not_trust_the_run_ca_cannot_connect(lab: Lab) -> None:
    port = lab.origin.port
    before = len(lab.origin.requests)
    script = f"""
curl -sS --cacert /etc/ssl/certs/ca-certificates.crt -o /dev/null https://origin.test:{port}/
"""
    with lab.proxy() as proxy:
        _code, out, _ = lab.agent(proxy, script)
    assert "SSL certificate problem" in out, out
    assert lab.origin.requests[before:] == []


def test_the_proxy_sends_no_secret_to_an_origin_it_cannot_verify(lab: Lab) -> None:
    """Without the origin's CA in sandbox.caCerts, the proxy refuses to talk to it."""
    port = lab.origin.port
    before = len(lab.origin.requests)
    script = f"curl -sS -o /dev/null -w 'code=%{{http_code}}\\n' https://origin.test:{port}/"
    with lab.proxy(trust=False) as proxy:
        _code, out, _ = lab.agent(proxy, script)
    assert "code=200" not in out and "code=" in out, out
    assert lab.origin.requests[before:] == []


def test_refused_methods_never_reach_the_destination(lab: Lab) -> None:
    port = lab.origin.port
    before = len(lab.origin.requests)
    script = "".join(
        f"echo \"{m}=$(curl -sS -X {m} -o /tmp/{m} -w '%{{http_code}}' "
        f'https://origin.test:{port}/echo)"; cat /tmp/{m}; echo\n'
        for m in ("TRACE", "TRACK", "OPTIONS", "PUT", "PROPFIND", "CONNECT")
    )
    with lab.proxy() as proxy:
        _code, out, _ = lab.agent(proxy, script)
        refused = audited(proxy, {"TRACE", "TRACK", "OPTIONS", "PUT", "PROPFIND"})
    found = lines(out)
    for method in ("TRACE", "TRACK", "OPTIONS", "PUT", "PROPFIND"):
        assert found[method] == "403", out
    assert "ERR_FKS_METHOD" in out and TOKEN not in out
    assert [r.method for r in lab.origin.requests[before:]] == []
    # The audit lists each refused request, with no secret added to it.
    assert all(r.status == 403 and r.secret is None for r in refused), refused


def audited(proxy: EgressProxy, methods: set[str]) -> list[RequestsRecord]:
    """The audit's rows for `methods` once all of them are in (their lines come a moment
    after the agent's answers)."""
    rows: list[RequestsRecord] = []
    deadline = time.monotonic() + 30
    while {r.method for r in rows} < methods and time.monotonic() < deadline:
        rows += proxy.take_traffic().network.requests
        time.sleep(0.05)
    return [r for r in rows if r.method in methods]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_no_way_back_for_the_secret(lab: Lab, runtime: str) -> None:
    """Redirects to another host, error pages, a Host header naming another destination (both
    ways), CONNECT to the secret's host on another port, plain HTTP: the token is never in
    what the agent gets, and only the secret's destination ever sees it."""
    port, other_port = lab.origin.port, lab.second.port
    to_other = f"https://other.test:{port}/echo"
    script = f"""
echo "--- redirect"; curl -sS -k -L "https://origin.test:{port}/redirect?to={to_other}"
echo "--- host header names an allowed host"
curl -sS -H "Host: other.test:{port}" https://origin.test:{port}/echo
echo "--- host header names the secret's host inside another host's tunnel"
curl -sS -k -H "Host: origin.test:{port}" https://other.test:{port}/echo
echo "--- the secret's host on another port (allowed: tunnelled)"
curl -sS -k https://origin.test:{other_port}/echo
echo "--- the secret's host on a port not allowed"
curl -sS -k https://origin.test:1/
echo "--- error pages"
curl -sS http://origin.test:{port}/echo; curl -sS -X DELETE https://origin.test:{port}/echo
curl -sS --max-time 5 https://origin.test:{port}/$(head -c 70000 /dev/zero | tr '\\0' a)
curl -sS -H "Max-Forwards: 0" -X OPTIONS https://origin.test:{port}/echo
"""
    allow = (f"other.test:{port}", f"origin.test:{other_port}")
    with lab.proxy(allow=allow) as proxy:
        _code, out, _ = lab.agent(proxy, script, runtime)
    assert TOKEN not in out, out
    # Refused: with TLS ended in the proxy, Squid answers a refused CONNECT with its page.
    assert "ERR_ACCESS_DENIED" in out.split("on a port not allowed")[1], out
    # Only the secret's own destination ever got the token, on its own host name.
    holding = [r for r in lab.origin.requests + lab.second.requests if TOKEN in repr(r.headers)]
    assert holding and all(r.host == f"origin.test:{port}" for r in holding)
    reached = [r for r in lab.origin.requests + lab.second.requests if r.path == "/echo"]
    assert reached and all(TOKEN not in repr(r.headers) for r in reached)


def test_wildcards_reach_subdomains_and_deny_wins(lab: Lab) -> None:
    port = lab.origin.port
    script = "".join(
        f"echo \"{n}=$(curl -sS -k -o /dev/null -w '%{{http_code}}' "
        f'https://{n}:{port}/echo 2>/dev/null)"\n'
        for n in ("a.wild.test", "b.c.wild.test", "wild.test", "wildx.test", "other.test")
    )
    with lab.proxy(allow=(f"*.wild.test:{port}", f"other.test:{port}"), deny=("other.test",)) as p:
        _code, out, _ = lab.agent(p, script)
    found = lines(out)
    assert found["a.wild.test"] == found["b.c.wild.test"] == "200", out
    # The proxy refused the CONNECT (curl reports the proxy's 403); deny covers every port.
    assert found["wild.test"] == found["wildx.test"] == found["other.test"] == "403", out
