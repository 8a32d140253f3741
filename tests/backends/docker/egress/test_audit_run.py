"""The egress audit of a real sandboxed run: an agent makes a known set of requests through
the proxy (allowed and refused, HTTP and CONNECT, and hand-made ones with hostile host names)
and `fks show --network` and its JSON list every one of them, shown safely."""

from __future__ import annotations

import http.server
import ipaddress
import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.containers import run_behind_proxy
from fks_testing.helpers import agent_lines, fks
from fks_testing.sandboxed import add_script, configure, sandbox

from sandbox_runner.backends.docker.egress.access_log import MODEL_API
from sandbox_runner.backends.docker.egress.audit import merged
from sandbox_runner.backends.docker.egress.proxy import SETTLE_S, EgressProxy
from sandbox_runner.backends.docker.egress.refusals import Refusals
from sandbox_runner.backends.docker.egress.upstream import ApiUpstream
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.results.reported import NetworkRecord

pytestmark = pytest.mark.docker

BODY = b"hello from the host\n"

# Raw requests to the proxy: host names holding an escape sequence, bidi controls (raw and
# percent-encoded), a space; then (AGENT) one with a Host header imitating a line of fks's own.
HOSTILE = (
    r"GET http://evil\033]0;owned\007\342\200\256gpj.test/",
    r"GET http://\342\200\256gpj.test/",
    r"CONNECT \342\200\256x.test:443",
    r"GET http://a\033[2Jb.test/",
    r"G\033ET http://a.test/",
    r"GET http://evil%%1b%%5b31m.test/",  # (printf's format: %% is %)
    r"GET http://a b.test/",
    r"GET http://[fks]/",
)

AGENT = r"""#!/bin/sh
get() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$@" || true; }
n=$(cat n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > n
if [ "$n" = 1 ]; then
    echo "got=$(get http://$ADDR:$OK/a) $(get http://$ADDR:$OK/b) $(get -X POST -d x http://$ADDR:$OK/)"
    echo "refused=$(get http://$ADDR:$OTHER/) $(get https://refused.audit.test/)"
    for req in HOSTILE; do
        printf "$req HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" \
            | socat -t 10 - TCP:127.0.0.1:3128 >/dev/null
    done
    printf 'GET http://x.test/ HTTP/1.1\r\nHost: [fks]\nMerged\r\nConnection: close\r\n\r\n' \
        | socat -t 10 - TCP:127.0.0.1:3128 >/dev/null
elif [ "$n" = 2 ]; then
    echo "again=$(get http://$ADDR:$OK/c)"
else
    echo FORKHESTRA_COMPLETE
fi
""".replace("HOSTILE", " ".join(f"'{r}'" for r in HOSTILE))


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def gateway() -> str:
    """The host's address on Docker's default bridge (containers reach it there)."""
    out = subprocess.run(
        ["docker", "network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    config = json.loads(out)[0]
    if "Gateway" in config:
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


@pytest.fixture
def servers() -> Iterator[tuple[str, int, int]]:
    """(address, allowed port, refused port): two HTTP servers on the bridge's gateway."""
    started = [http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Hello) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield gateway(), started[0].server_address[1], started[1].server_address[1]
    for server in started:
        server.shutdown()
        server.server_close()


def test_every_request_is_listed_and_shown_safely(
    repo: Path, servers: tuple[str, int, int]
) -> None:
    """Three iterations: the requests, one more, none (a request's log line may come after
    its iteration ended: it counts in the next one, so the run's sums are what is certain)."""
    address, ok, other = servers
    add_script(repo, "audit.sh", AGENT)
    configure(repo, {"sandbox": {"env": ["ADDR", "OK", "OTHER"]}})
    env = {"ADDR": address, "OK": str(ok), "OTHER": str(other)}
    res = sandbox("./scripts/audit.sh:3", "--allow", f"{address}:{ok}", env=env)
    assert res.code == 0, res.output
    said = agent_lines(res.stdout)
    assert "got=200 200 501" in said and "refused=403 000" in said, res.output
    assert "again=200" in said, res.output

    shown = fks("show", "last", "--network", "--json")
    assert shown.code == 0, shown.output
    iterations = json.loads(shown.stdout)["steps"][0]["iterations"]
    assert len(iterations) == 3 and all(it["network"] is not None for it in iterations)
    counts: Counter[tuple[object, ...]] = Counter()
    for it in iterations:
        assert it["network"]["more"] == 0, it
        for r in it["network"]["requests"]:
            counts[(r["host"], r["port"], r["method"], r["status"], r["result"])] += r["count"]
            assert r["secret"] is None and r["sent"] > 0, r
            if r["host"] == address and r["status"] == 200:
                assert r["received"] >= r["count"] * len(BODY), r
    assert counts.pop((address, ok, "GET", 200, "TCP_MISS")) == 3
    assert counts.pop((address, ok, "POST", 501, "TCP_MISS")) == 1
    assert counts.pop((address, other, "GET", 403, "TCP_DENIED")) == 1
    assert counts.pop(("refused.audit.test", 443, "CONNECT", 403, "TCP_DENIED")) == 1
    # The hand-made requests: each listed, none let through, whatever Squid made of its host.
    assert sum(counts.values()) == len(HOSTILE) + 1, counts
    assert all(str(key[4]).startswith(("TCP_DENIED", "NONE")) for key in counts), counts

    table = fks("show", "last", "--network")
    assert table.code == 0, table.output
    text = table.stdout
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert not [line for line in text.splitlines() if line.startswith(("[fks]", "Merged"))]
    lines = [" ".join(line.split()) for line in text.splitlines()]
    for row in (
        f"GET {address}:{ok} 200 TCP_MISS",
        f"1 POST {address}:{ok} 501 TCP_MISS",
        f"1 GET {address}:{other} 403 TCP_DENIED",
        "1 CONNECT refused.audit.test:443 403 TCP_DENIED",
    ):
        assert any(row in line for line in lines), (row, text)
    heads = [line for line in lines if line.startswith("#")]
    assert sum(int(head.split()[2]) for head in heads) == 7 + len(HOSTILE), heads


def _api_server() -> http.server.ThreadingHTTPServer:
    class Api(_Hello):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.do_GET()

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _in_agent_container(proxy: EgressProxy, script: str) -> str:
    """`script` as the sandbox runs an agent (production's settings): network none, the
    proxy's sockets and env."""
    ran = run_behind_proxy(docker_client(), proxy, script, labels={"fks.test": "egress"})
    assert ran.code == 0
    return ran.output


def test_the_model_apis_calls_are_marked_as_carrying_its_credential(
    servers: tuple[str, int, int],
) -> None:
    """Calls through the API port get the credential added (secret "model API"); its warm-up
    HEAD and what it refuses get none, and a refusal there is none of the allow-list's."""
    address, ok, _other = servers
    api_server = _api_server()
    api = ApiUpstream(f"http://{address}:{api_server.server_address[1]}", "sk-ant-test-key")
    script = (
        "c() { curl -s -o /dev/null -w '%{http_code} ' \"$@\"; }; "
        'c -X POST -d "{}" "$ANTHROPIC_BASE_URL/v1/messages"; c -I "$ANTHROPIC_BASE_URL/"; '
        'c "$ANTHROPIC_BASE_URL/other"; c "$ANTHROPIC_BASE_URL/v1/models"; '
        f"c http://{address}:{ok}/x"
    )
    try:
        with EgressProxy(
            docker_client(),
            run_id=f"audit-test-{uuid.uuid4().hex[:8]}",
            allow=[AllowEntry.parse(f"{address}:{ok}")],
            api=api,
            labels={"fks.test": "egress"},
        ) as proxy:
            output = _in_agent_container(proxy, script)
            assert output.split() == ["200", "200", "403", "200", "200"], output
            network, refusals = NetworkRecord(), Refusals()
            deadline = time.monotonic() + 60
            while network.total < 5 and time.monotonic() < deadline:  # until all lines came
                taken = proxy.take_traffic(settled_at=time.time() + SETTLE_S)
                network, refusals = merged(network, taken.network), refusals.plus(taken.refusals)
    finally:
        api_server.shutdown()
        api_server.server_close()
    assert network.total == 5, network
    marked = {
        (r.method, r.status, r.result.startswith("TCP_DENIED"), r.secret) for r in network.requests
    }
    assert marked == {
        ("POST", 200, False, MODEL_API),
        ("GET", 200, False, MODEL_API),
        ("HEAD", 200, False, None),
        ("GET", 403, True, None),
        ("GET", 200, False, None),
    }, network
    assert refusals == Refusals()
