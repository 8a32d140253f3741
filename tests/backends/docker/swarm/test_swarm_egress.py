"""`--engine swarm` with the default network (`allowlist`), on a real two-node swarm: the agent's
task on the worker has no route of its own and reaches only the allowed hosts, through the
egress proxy beside it on its node; the model key lives in that proxy only."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.claude import API_KEY, bash, run_fks
from fks_testing.engines import (
    StartedContainers,
    TwoNodeSwarm,
    leftovers,
    prepared_swarm,
)
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import agent_lines, fks, git, init_repo, write_config

from sandbox_runner.plan.prompts import MARKER

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]


@pytest.fixture(scope="module")
def swarm(module_swarm: TwoNodeSwarm) -> Iterator[TwoNodeSwarm]:
    """The module's swarm (swarm/conftest.py) with fks's images on the worker and the manager
    drained: every task lands on the worker."""
    swarm = prepared_swarm(module_swarm, "fks-agent:latest", "fks-proxy:latest")
    node = swarm.main.nodes.get(swarm.manager_id)
    spec = node.attrs["Spec"]
    spec["Availability"] = "drain"
    node.update(spec)
    yield swarm


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    """Two HTTP servers on every address of this machine: (allowed port, other port)."""
    started = [http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Hello) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield started[0].server_address[1], started[1].server_address[1]
    for server in started:
        server.shutdown()
        server.server_close()


def main_address() -> str:
    """This machine's address on its main interface: another host, to the worker's tasks."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout
    return next(a for a in found.split() if a.startswith(("10.", "192.", "172.")) and ":" not in a
                and not a.startswith(("172.17.", "10.231.")))  # fmt: skip


PROBE = """#!/bin/sh
get() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }
echo "allowed=$(get http://$ADDR:$OK/)"
echo "other-port=$(get http://$ADDR:$OTHER/)"
echo "other-host=$(get http://$ELSE:$OK/)"
echo "node-engine=$(get http://$NODE:2375/info)"
echo "manager-engine=$(get http://$ADDR:2375/info)"
echo "direct-allowed=$(get --noproxy '*' http://$ADDR:$OK/)"
echo "direct-node-engine=$(get --noproxy '*' http://$NODE:2375/info)"
echo "direct-other-host=$(get --noproxy '*' http://$ELSE:$OK/)"
getent hosts example.com >/dev/null 2>&1 && echo "dns=answered" || echo "dns=none"
echo FORKHESTRA_COMPLETE
"""


def probe_repo(path: Path, sandbox: dict[str, object]) -> Path:
    repo = init_repo(path, {"README.md": "hello\n", "probe.sh": PROBE})
    (repo / "probe.sh").chmod(0o755)
    write_config(repo, {"sandbox": {"memory": "512m", **sandbox}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "probe")
    return repo


@pytest.mark.timeout(600)
def test_allowlist_on_the_worker_reaches_the_allowed_server_and_nothing_else(
    swarm: TwoNodeSwarm, servers: tuple[int, int], tmp_path: Path
) -> None:
    ok, other = servers
    address, node = swarm.second.host_ip, swarm.second.ip
    repo = probe_repo(
        tmp_path / "repo",
        {"allow": [f"{address}:{ok}"], "env": ["ADDR", "OK", "OTHER", "ELSE", "NODE"]},
    )
    env = {
        "ADDR": address,
        "OK": str(ok),
        "OTHER": str(other),
        "ELSE": main_address(),
        "NODE": node,
    }
    with StartedContainers(swarm.second.url) as on_worker:
        res = fks(
            "run", "./probe.sh:1", "--sandbox", "--engine", "swarm", cwd=repo, env=env, timeout=400
        )
    assert res.code == 0, res.output
    seen = dict(
        line.split("=", 1) for line in agent_lines(res.stdout) if "=" in line and " " not in line
    )
    assert seen["allowed"] == "200", res.output
    # Through the proxy: refused. Directly: no route at all, no names.
    assert seen["other-port"] == seen["other-host"] == "403", seen
    assert seen["node-engine"] == seen["manager-engine"] == "403", seen
    assert seen["direct-allowed"] == seen["direct-node-engine"] == "000", seen
    assert seen["direct-other-host"] == "000" and seen["dns"] == "none", seen
    assert f"1 request to {node}:2375 was denied" in res.output, res.output
    record = json.loads(next((repo / ".forge" / "runs").glob("*/run.json")).read_text())
    ids = [it["container_id"] for s in record["steps"] for it in s["iterations"]]
    assert ids and set(ids) <= on_worker.ids, (ids, on_worker.ids)
    assert record["steps"][0]["iterations"][0]["denied"], record["steps"][0]
    assert leftovers(swarm, tmp_path, record["id"]) == {}


@pytest.mark.claude
@pytest.mark.timeout(700)
def test_claude_completes_on_the_worker_through_its_proxy_and_never_holds_the_key(
    swarm: TwoNodeSwarm, tmp_path: Path
) -> None:
    """The real claude CLI on the worker: the fake API (on the address the worker reaches)
    gets the real key from the node's proxy; the task's environment, files and service spec
    hold none of it, and neither does any service's spec."""
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(
        repo,
        {
            "agents": {"worker": {"systemPromptText": "You are the worker.", "maxTurns": 5}},
            "sandbox": {"memory": "1g"},
        },
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    look = (
        f'k=$(echo "{API_KEY[::-1]}" | rev); echo "key=$ANTHROPIC_API_KEY"; env | grep -c "$k"; '
        'grep -rl "$k" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l'
    )
    specs = ServiceSpecs(swarm)
    with FakeAnthropic(host="0.0.0.0") as fake, specs:
        fake.add_conversation([[bash(look, "look for the key")], [{"text": f"Done.\n{MARKER}"}]])
        env = {
            "ANTHROPIC_BASE_URL": f"http://{swarm.second.host_ip}:{fake.port}",
            "ANTHROPIC_API_KEY": API_KEY,
        }
        res = run_fks(
            "run", "worker:1", "--prompt", "Go.", "--sandbox", "--engine", "swarm",
            cwd=repo, env=env, timeout=500,
        )  # fmt: skip
    assert res.code == 0, res.tail()
    shown = fake.main_requests(0)[-1].tool_results[0]["content"].split()
    assert shown[0] == "key=fks-placeholder-the-egress-proxy-adds-the-real-credential", shown
    assert shown[1:] == ["0", "0"], shown  # not in the environment, not in any file
    assert {r.api_key for r in fake.main_requests()} == {API_KEY}
    roles = {s["Spec"]["Labels"].get("fks.role") for s in specs.seen.values()}
    assert "egress-proxy" in roles and None in roles, roles  # the proxy's and the agent's
    for spec in specs.seen.values():
        assert API_KEY not in json.dumps(spec), spec["Spec"]["Name"]
    record = json.loads(next((repo / ".forge" / "runs").glob("*/run.json")).read_text())
    assert leftovers(swarm, tmp_path, record["id"]) == {}


class ServiceSpecs:
    """Every fks service's `docker service inspect` while the block runs (polled)."""

    def __init__(self, swarm: TwoNodeSwarm) -> None:
        self._client = swarm.main
        self.seen: dict[str, dict[str, object]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ServiceSpecs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=30)

    def _poll(self) -> None:
        while not self._done.wait(0.2):
            try:
                for service in self._client.api.services(filters={"label": "fks.run"}):
                    self.seen[service["ID"]] = service
            except Exception:
                continue
