"""fks's own scripts run as swarm services (`run_script`: a workspace's base loaded, a node's
volumes listed or swept), and what runs on every node of the swarm through that node's own
engine: the volumes of runs found (`find_volumes`) and removed (`sweep_volumes`)."""

from __future__ import annotations

import contextlib
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import ExecResult, ExecSpec
from sandbox_runner.backends.docker.runners.container import ContainerSettings, Mount
from sandbox_runner.backends.docker.swarm.service import ServiceSandbox
from sandbox_runner.bounded import load_json
from sandbox_runner.labels import LABEL_ROLE, LABEL_SOCKET

if TYPE_CHECKING:
    import docker

_SCRIPT_OUTPUT_LIMIT = 4 << 20


@dataclass(frozen=True)
class ScriptRun:
    """What a service running one of fks's own scripts printed, and how it ended."""

    stdout: bytes
    stderr: bytes
    result: ExecResult
    node: str | None


def run_script(sandbox: ServiceSandbox, spec: ExecSpec) -> ScriptRun:
    """Run fks's own `sh -c SCRIPT …` (`spec.argv`) as a service, its output bounded: the
    script closes with a line of a random token once it has succeeded, and the log stream waits
    for no late output after that line (see `LogPump.settle`)."""
    shell, flag, script, *args = spec.argv
    token = f"fks-script-done-{secrets.token_hex(8)}\n".encode()
    closed = replace(spec, argv=(shell, flag, f"{script}\necho {token.decode().strip()}", *args))
    out, err = bytearray(), bytearray()
    with sandbox.start(closed) as execution:
        for stream, chunk in execution.chunks():
            kept = out if stream == "stdout" else err
            kept += chunk[: max(0, _SCRIPT_OUTPUT_LIMIT - len(kept))]
            if stream == "stdout" and out.endswith(token):
                execution.settle()
        result = execution.wait()
        node = execution.node_id
    stdout = bytes(out[: -len(token)] if out.endswith(token) else out)
    return ScriptRun(stdout=stdout, stderr=bytes(err), result=result, node=node)


DEFAULT_SOCKET = "/var/run/docker.sock"
"""Where a node's engine listens unless its label fks.docker-socket says otherwise."""
# Removes, through the node's own engine, every volume with the given label (sh, curl, and
# python3 for the JSON: all in the agent image). Volumes in use are left (409).
_SWEEP = (
    "set -e; for label; do "
    "q=$(python3 -c 'import json,sys,urllib.parse as u; "
    'print(u.quote(json.dumps({"label": [sys.argv[1]]})))\' "$label"); '
    'curl -fsS --unix-socket /fks.sock "http://engine/volumes?filters=$q" | '
    'python3 -c \'import json,sys; [print(v["Name"]) for v in json.load(sys.stdin)["Volumes"] or []]\' | '
    "while read -r name; do for try in $(seq 50); do "
    'code=$(curl -sS -o /dev/null -w "%{http_code}" -X DELETE --unix-socket /fks.sock '
    '"http://engine/volumes/$name"); [ "$code" = 409 ] || break; sleep 0.2; done; '
    'echo "$code $name"; done; done'
)
"""`sh -c` with the labels as arguments; a volume still in use (its task's container being
removed) is tried again every 0.2 s for up to 10 s."""


class _Sweeper(ServiceSandbox):
    """A service with its node's engine socket bind-mounted: fks's own, never an agent's."""

    def _mounts(self) -> list[dict[str, Any]]:
        return [
            {"Type": "bind", "Source": m.source, "Target": m.target or m.source}
            for m in self._settings.mounts
        ]


_LIST = (
    "set -e; for label; do "
    "q=$(python3 -c 'import json,sys,urllib.parse as u; "
    'print(u.quote(json.dumps({"label": [sys.argv[1]]})))\' "$label"); '
    'curl -fsS --unix-socket /fks.sock "http://engine/volumes?filters=$q" | '
    'python3 -c \'import json,sys; [print(json.dumps([v["Name"], v.get("Labels") or {}])) '
    'for v in json.load(sys.stdin)["Volumes"] or []]\'; done'
)
"""`sh -c` with the labels as arguments: one JSON line `[name, labels]` per volume found."""


def sweep_volumes(client: docker.DockerClient, labels: list[str], image: str) -> list[str]:
    """Remove the volumes with any of `labels` (`key=value`) on every node of the swarm, each
    through its own engine (a service pinned to it with that engine's socket); returns the
    lines `<HTTP status> <volume>` of what was tried."""
    return [line for _node, line in _on_every_node(client, _SWEEP, labels, image)]


def find_volumes(
    client: docker.DockerClient, labels: list[str], image: str
) -> dict[str, tuple[str, dict[str, str]]]:
    """The volumes with any of `labels` on every node: name -> (node id, the volume's labels).
    What a node's engine says is data: anything but a name and string labels is left out."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for node, line in _on_every_node(client, _LIST, labels, image):
        with contextlib.suppress(ValueError):
            name, tags = load_json(line, max_bytes=65536)
            if isinstance(name, str) and isinstance(tags, dict):
                found[name] = (node, {str(k): str(v) for k, v in tags.items()})
    return found


def _on_every_node(
    client: docker.DockerClient, script: str, labels: list[str], image: str
) -> list[tuple[str, str]]:
    """`script` with `labels` as its arguments on every ready node that takes tasks (a drained
    or paused node runs none: a service pinned there would only wait), talking to that node's
    engine socket; its output lines, each with the node's id."""
    nodes = [
        node
        for node in client.nodes.list()
        if node.attrs.get("Status", {}).get("State") == "ready"
        and node.attrs.get("Spec", {}).get("Availability", "active") == "active"
    ]
    if not nodes:
        return []
    with ThreadPoolExecutor(min(len(nodes), 8), thread_name_prefix="fks-sweep") as pool:
        outputs = list(pool.map(lambda n: _on_node(client, n, script, labels, image), nodes))
    return [
        (node.id, line)
        for node, output in zip(nodes, outputs, strict=True)
        for line in output.decode(errors="replace").splitlines()
    ]


def _on_node(
    client: docker.DockerClient, node: Any, script: str, labels: list[str], image: str
) -> bytes:
    """`script`'s output on `node`, through that node's engine socket."""
    socket = (node.attrs.get("Spec", {}).get("Labels") or {}).get(LABEL_SOCKET, DEFAULT_SOCKET)
    settings = ContainerSettings(
        image=image,
        user="0:0",
        mounts=[Mount(source=socket, target="/fks.sock")],
        network="bridge",
        memory="256m",
        labels={LABEL_ROLE: "volume-sweep"},
        read_only=False,
    )
    spec = ExecSpec(argv=("sh", "-c", script, "fks-sweep", *labels), cwd=Path("/"), timeout=120)
    return run_script(_Sweeper(client, settings, node=node.id), spec).stdout
