"""What a sandboxed agent can reach, through the real CLI and engine, with local servers only:
the allow-list through fks's egress proxy (the default), `open`, and `none`."""

from __future__ import annotations

import http.server
import ipaddress
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.helpers import agent_lines, fks
from fks_testing.sandboxed import (
    RUNTIMES,
    add_script,
    configure,
    record,
    runtime_args,
    sandbox,
)

pytestmark = pytest.mark.docker


def gateway() -> str:
    """The host's address on Docker's default bridge (docker0)."""
    out = subprocess.run(
        ["docker", "network", "inspect", "bridge"], capture_output=True, text=True, check=True
    ).stdout
    config = json.loads(out)[0]["IPAM"]["Config"][0]
    if "Gateway" in config:
        return str(config["Gateway"])
    subnet = ipaddress.ip_network(config["Subnet"])  # Docker 20.10 omits it: the first host
    return str(next(subnet.hosts()))


def host_address() -> str:
    """The host's address on its own main interface (not docker0, not loopback)."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout
    return next(a for a in found.split() if not a.startswith(("172.17.", "127.")) and ":" not in a)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the host\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[str, int, int]]:
    """Two HTTP servers on the docker0 address: (address, allowed port, other port)."""
    address = gateway()
    # On every address of the host: a direct connection to any of them must fail.
    started = [http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Hello) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield address, started[0].server_address[1], started[1].server_address[1]
    for server in started:
        server.shutdown()
        server.server_close()


PROBE = """#!/bin/sh
get() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }
echo "proxied-allowed=$(get http://$ADDR:$OK/)"
echo "proxied-by-name=$(get http://host.docker.internal:$OK/)"
echo "proxied-other=$(get http://$ADDR:$OTHER/)"
echo "direct-gateway=$(get --noproxy '*' http://$ADDR:$OK/)"
echo "direct-host-internal=$(get --noproxy '*' http://host.docker.internal:$OK/)"
echo "direct-host-other=$(get --noproxy '*' http://$HOSTIP:$OK/)"
getent hosts example.com >/dev/null 2>&1 && echo "dns=answered" || echo "dns=none"
echo FORKHESTRA_COMPLETE
"""


def probe(
    repo: Path, servers: tuple[str, int, int], sandbox_cfg: dict[str, object], *args: str
) -> dict[str, str]:
    """Run the probe agent; its `name=value` lines (and its whole stdout as `stdout`)."""
    address, ok, other = servers
    if not (repo / "scripts" / "probe.sh").exists():
        add_script(repo, "probe.sh", PROBE)
    configure(repo, {"sandbox": {**sandbox_cfg, "env": ["ADDR", "OK", "OTHER", "HOSTIP"]}})
    env = {"ADDR": address, "OK": str(ok), "OTHER": str(other), "HOSTIP": host_address()}
    res = sandbox("./scripts/probe.sh:1", *args, env=env)
    assert res.code == 0, res.output
    lines = [line for line in agent_lines(res.stdout) if "=" in line and " " not in line]
    return {**dict(line.split("=", 1) for line in lines), "stdout": res.stdout}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_allowlist_reaches_only_allowed_hosts_through_the_proxy(
    repo: Path, servers: tuple[str, int, int], runtime: str
) -> None:
    address, ok, other = servers
    allow = ("--allow", f"{address}:{ok}", "--allow", f"host.docker.internal:{ok}")
    seen = probe(repo, servers, {}, *allow, *runtime_args(runtime))
    assert seen["proxied-allowed"] == "200"  # allowed by IP
    assert seen["proxied-by-name"] == "200"  # allowed by a name the proxy maps to it
    assert seen["proxied-other"] == "403"  # refused by the proxy
    # No route of its own: not the host's bridge address, not host.docker.internal, nothing else.
    assert seen["direct-gateway"] == "000" and seen["direct-host-internal"] == "000"
    assert seen["direct-host-other"] == "000"
    assert seen["dns"] == "none"
    assert (
        f"1 request to {address}:{other} was denied; allow with --allow {address}:{other}"
        in seen["stdout"]
    )
    rec = record(repo)
    denied = rec["steps"][0]["iterations"][0]["denied"]
    assert denied == [{"host": address, "port": other, "count": 1}]
    shown = fks("show", "last")
    assert f"denied: 1 request to {address}:{other}" in shown.stdout, shown.output
    proxies = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=fks.run={rec['id']}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert proxies == []  # the run's proxy went with it


def test_allow_entries_from_the_config(repo: Path, servers: tuple[str, int, int]) -> None:
    address, ok, _other = servers
    seen = probe(repo, servers, {"allow": [f"{address}:{ok}"]})
    assert seen["proxied-allowed"] == "200" and seen["proxied-other"] == "403"


def test_open_and_none(repo: Path, servers: tuple[str, int, int]) -> None:
    seen = probe(repo, servers, {"network": "open"})
    assert seen["direct-gateway"] == "200" and seen["direct-host-other"] == "200"  # by choice
    seen = probe(repo, servers, {"network": "none"})
    assert seen["proxied-allowed"] == "000" and seen["direct-gateway"] == "000"
    assert seen["dns"] == "none"


def test_dry_run_shows_each_steps_network(repo: Path) -> None:
    configure(repo, {"sandbox": {"allow": ["pypi.org"]}})
    res = sandbox("./scripts/commit.sh:2", "--dry-run", "--allow", "files.example.com:8443")
    assert res.code == 0, res.output
    assert (
        "network: allowlist: pypi.org, files.example.com:8443; everything else refused"
        in res.stdout
    )
    res = sandbox("./scripts/commit.sh:2", "--dry-run", "--allow", "not a host")
    assert res.code == 2 and "--allow" in res.stderr and len(res.stderr.splitlines()) == 1, (
        res.output
    )


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_warm_iteration_goes_out_through_the_proxy(
    repo: Path, servers: tuple[str, int, int], runtime: str
) -> None:
    """A step's iterations share one network namespace (warm containers): the forwarders to the
    proxy run once, in its holder, and every iteration reaches the allowed host through them -
    also after the container of the one before is gone - and nothing else."""
    address, ok, other = servers
    add_script(
        repo,
        "each.sh",
        "#!/bin/sh\n"
        "get() { curl -s -o /dev/null -m 5 -w '%{http_code}' \"$@\" || true; }\n"
        'echo "each-allowed=$(get http://$ADDR:$OK/) each-other=$(get http://$ADDR:$OTHER/)'
        " each-direct=$(get --noproxy '*' http://$ADDR:$OK/)\"\n"
        "n=$(cat n 2>/dev/null || echo 0); echo $((n + 1)) > n\n"
        '[ "$n" -ge 3 ] && echo FORKHESTRA_COMPLETE\n'
        "exit 0\n",
    )
    configure(repo, {"sandbox": {"env": ["ADDR", "OK", "OTHER"]}})
    env = {"ADDR": address, "OK": str(ok), "OTHER": str(other)}
    res = sandbox(
        "./scripts/each.sh:6", "--allow", f"{address}:{ok}", *runtime_args(runtime), env=env
    )
    assert res.code == 0, res.output
    assert res.stdout.count("each-allowed=200 each-other=403 each-direct=000") == 4, res.stdout
    # Each refusal is counted once, also when the iteration before was less than 1 s ago (a
    # line that arrives after its iteration's take counts in the next one).
    iterations = record(repo)["steps"][0]["iterations"]
    denied = [d for it in iterations for d in it["denied"]]
    assert {(d["host"], d["port"]) for d in denied} == {(address, other)}, denied
    assert sum(d["count"] for d in denied) == 4, denied
    assert "4 requests to" in res.stdout and "were denied" in res.stdout, res.stdout


FLOOD = """#!/bin/sh
# 1,200 hosts refused once each and one three times (before, and after, them), pipelined on
# one connection; the last request closes it. Prints how many refusals came back.
i=0
{
    printf 'GET http://most.flood.test/ HTTP/1.1\\r\\nHost: most.flood.test\\r\\n\\r\\n'
    while [ $i -lt 1200 ]; do
        printf 'GET http://h%d.flood.test/ HTTP/1.1\\r\\nHost: h%d.flood.test\\r\\n\\r\\n' $i $i
        i=$((i + 1))
    done
    printf 'GET http://most.flood.test/ HTTP/1.1\\r\\nHost: most.flood.test\\r\\n\\r\\n'
    printf 'GET http://most.flood.test/ HTTP/1.1\\r\\nHost: most.flood.test\\r\\nConnection: close\\r\\n\\r\\n'
} | socat -t 60 - TCP:127.0.0.1:3128,shut-none | grep -c '^HTTP/1.1 403' | sed 's/^/refused=/'
echo FORKHESTRA_COMPLETE
"""


def test_a_flood_of_refused_hosts_is_reported_in_bounded_space(repo: Path) -> None:
    """An agent that asks for any number of hosts gets them refused; the run's record lists
    the 20 most refused of the iteration (of the first 1,000 destinations, counted one by one)
    and sums up the rest, the step's end names 10 and sums up the rest: nothing grows with the
    number of hosts, and no refusal goes uncounted."""
    add_script(repo, "flood.sh", FLOOD)
    res = sandbox("./scripts/flood.sh:1", timeout=240)
    assert res.code == 0 and "refused=1203" in res.stdout, res.output
    iteration = record(repo)["steps"][0]["iterations"][0]
    listed = iteration["denied"]
    assert len(listed) == 20 and listed[0] == {"host": "most.flood.test", "port": 80, "count": 3}
    assert sum(d["count"] for d in listed) + iteration["denied_more"] == 1203
    warnings = [line for line in res.stdout.splitlines() if " denied" in line]
    assert len(warnings) == 11, warnings
    assert warnings[0].endswith(
        "3 requests to most.flood.test:80 were denied; allow with --allow most.flood.test"
    )
    assert "1191 more requests were denied, to other destinations" in warnings[-1], warnings
    runs = repo / ".forge" / "runs"
    assert sum(f.stat().st_size for f in runs.glob("*/run.json")) < 64 * 1024
    shown = fks("show", "last").stdout.splitlines()
    assert len([line for line in shown if "denied:" in line]) == 21, shown
    assert f"denied: {iteration['denied_more']} more requests to other destinations" in "\n".join(
        shown
    )
