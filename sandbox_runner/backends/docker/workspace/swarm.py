"""Workspaces on a Docker Swarm: the manager's API is all fks talks to.

A step's workspace and its object store are volumes on one node: the first service that
mounts them (the loader of the step's base) is placed by Swarm, and every later service of the
workspace is pinned to that node (`Placement`). A task on another node cannot be handed a file
through the API, so the loader fetches its pack over HTTP from this machine (`PackServer`:
one random path per pack, on the address the swarm knows the manager by, for as long as the
load takes). Commits come back through the service's log stream (see `runners/service.py`).
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
import threading
from collections.abc import Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from sandbox_runner.backends.docker.runners.container import ContainerSettings, DockerSandbox, Mount
from sandbox_runner.backends.docker.runners.service import ServiceSandbox
from sandbox_runner.backends.docker.runners.service_script import run_script
from sandbox_runner.backends.docker.runners.task_network import StepNetwork
from sandbox_runner.backends.docker.workspace.export import (
    OBJECTS,
    Export,
    ExportError,
    LoggedBundle,
    PreparedLine,
    ReportFilter,
    max_bundle_bytes,
)
from sandbox_runner.backends.docker.workspace.shipping import (
    _INDEX,
    LOADER_TIMEOUT_S,
    Placement,
    ShippedObjects,
)
from sandbox_runner.backends.docker.workspace.volume import Collector, VolumeWorkspace
from sandbox_runner.bounded import load_json
from sandbox_runner.errors import SandboxError
from sandbox_runner.git.repo import Repo
from sandbox_runner.labels import LABEL_ROLE, LABEL_SOCKET

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.api import ExecSpec, Execution, Sandbox

_CHUNK = 1 << 20


def manager_address(client: docker.DockerClient) -> str:
    """The address the swarm's nodes reach this machine's manager at; SandboxError if the
    engine is no manager of a swarm."""
    swarm = client.info().get("Swarm") or {}
    if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
        raise SandboxError(
            "sandbox engine 'swarm': the local Docker engine is not a swarm manager; "
            "make one with 'docker swarm init' (and 'docker swarm join' on the other machines)"
        )
    address = swarm.get("NodeAddr")
    if not isinstance(address, str) or not address:
        raise SandboxError("sandbox engine 'swarm': the swarm reports no address for this node")
    return address


class PackServer:
    """Serves files over HTTP on `address`, each at a random path while it is offered."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._files: dict[str, Path] = {}
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> Self:
        files = self._files

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = files.get(self.path.lstrip("/"))
                if path is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(path.stat().st_size))
                self.end_headers()
                with path.open("rb") as data, contextlib.suppress(OSError):
                    while chunk := data.read(_CHUNK):
                        self.wfile.write(chunk)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: a request is no news."""

        self._server = ThreadingHTTPServer((self._address, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fks-packs", daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def offer(self, path: Path) -> tuple[str, str]:
        """(token, URL) of `path`, until `withdraw(token)`."""
        assert self._server is not None, "with PackServer(...) first"
        token = secrets.token_urlsafe(24)
        self._files[token] = path
        port = self._server.server_address[1]
        return token, f"http://{self._address}:{port}/{token}"

    def withdraw(self, token: str) -> None:
        self._files.pop(token, None)


class SwarmObjects(ShippedObjects):
    """The object store volume on a swarm node, loaded by a service that fetches the pack."""

    thin = True  # the loader completes them from what the volume holds

    def __init__(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        *,
        image: str,
        labels: Mapping[str, str],
        server: PackServer,
        placement: Placement,
    ) -> None:
        super().__init__(client, repo, name, image=image, labels=labels)
        self._server = server
        self.placement = placement

    def _load(self, pack: Path) -> None:
        from sandbox_runner.backends.api import ExecSpec

        token, url = self._server.offer(pack)
        script = (
            f"set -e; curl -fsS --retry 3 -o /tmp/fks-in.pack {shlex.quote(url)}; "
            + _INDEX.format(pack="/tmp/fks-in.pack")
        )
        settings = ContainerSettings(
            image=self._image,
            user="0:0",
            mounts=[Mount(source=self.name, target=OBJECTS, volume=True)],
            network="bridge",
            memory="1g",
            labels=self._labels,
            read_only=False,
        )
        spec = ExecSpec(argv=("sh", "-c", script), cwd=Path("/"), timeout=LOADER_TIMEOUT_S)
        try:
            services = ServiceSandbox(self._client, settings, node=self.placement.node)
            ran = run_script(services, spec)
        finally:
            self._server.withdraw(token)
        if ran.result.exit_code != 0:
            tail = (ran.stdout + ran.stderr).decode(errors="replace").strip().splitlines()[-3:]
            raise SandboxError(
                f"could not load the workspace's base into volume {self.name} on the swarm: "
                f"{' / '.join(tail) or 'exit ' + str(ran.result.exit_code)}"
            )
        if self.placement.node is None:
            self.placement.node = ran.node

    def ensure(self) -> None:
        """Made on its node by the first service that mounts it."""

    def remove(self) -> None:
        """Removed on its node with the workspace (see `SwarmWorkspace.remove`)."""


class SwarmWorkspace(VolumeWorkspace):
    """A workspace volume on the node of its `Placement`, made there by its first service."""

    def __init__(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: Mapping[str, str],
        *,
        shipped: SwarmObjects,
    ) -> None:
        super().__init__(client, repo, name, labels, shipped=shipped)
        self.placement = shipped.placement
        self._where = shipped.placement
        self._swarm_objects = shipped
        self._base_names = (name, shipped.name)
        self._moves = 0
        self._network = StepNetwork(client)
        """What the step's iterations share when they are to reach nothing."""

    def exists(self) -> bool:
        return self._where.node is not None

    def ensure(self) -> None:
        """Made on its node by the first service that mounts it."""

    def remove(self) -> None:
        """Removed with the run's other volumes on every node (`sweep_volumes`)."""

    def relocate(self) -> None:
        """Its node is gone: new volumes on whichever node Swarm places the next service on,
        which start empty (everything is sent again)."""
        self._moves += 1
        self.name = f"{self._base_names[0]}-{self._moves}"
        self._swarm_objects.name = f"{self._base_names[1]}-{self._moves}"
        self._swarm_objects.forget()
        self._where.node = None
        self.base_index = None

    # --- an iteration runs as a service pinned to the node; its work comes in its log stream ---

    def runner(self, containers: DockerSandbox, settings: ContainerSettings) -> Sandbox:
        """A service on the workspace's node (on any node until the first one ran)."""
        return ServiceSandbox(
            self._client, settings, node=self.placement.node, network=self._network
        )

    def idle(self) -> None:
        """The step is over: its network goes (made again by the next step's first task)."""
        self._network.close()

    def placed(self, execution: Execution) -> None:
        """The first service ran on some node: the workspace's volumes are there now."""
        if self.placement.node is None:
            self.placement.node = getattr(execution, "node_id", None)

    def log_channel(self, env: dict[str, str], nonce: str, scratch: Path) -> LoggedBundle | None:
        """The bundle comes through the log stream (the task's container is out of reach)."""
        env["FKS_EXPORT_VIA"] = "log"
        return LoggedBundle(nonce, scratch / f"bundle-{nonce}", limit=max_bundle_bytes())

    def read_export(self, container_id: str, scratch: Path) -> Export:
        """A swarm task's report was all there is."""
        raise ExportError("the iteration ended before it reported its work")

    def export(self, owner: Collector, settings: ContainerSettings, spec: ExecSpec) -> None:
        """The same as a service pinned to the workspace's node, its report and bundle read
        from its log stream."""
        from sandbox_runner.backends.docker.runners.service import NodeLostError
        from sandbox_runner.backends.docker.workspace.sandbox import Exporting, WorkspaceSandbox

        assert isinstance(owner, WorkspaceSandbox)

        nonce = secrets.token_hex(8)
        env = {**spec.env, "FKS_NONCE": nonce}
        logged = self.log_channel(env, nonce, owner.scratch)
        # A network of its own, gone with it: a salvage may run where no step closes after it.
        runner = ServiceSandbox(self._client, settings, node=self.placement.node)
        try:
            with runner.start(replace(spec, env=env)) as execution:
                exporting = Exporting(
                    execution, owner, "export", PreparedLine(nonce), ReportFilter(nonce), logged
                )
                for _chunk in exporting.chunks():
                    pass
                exporting.wait()
        except NodeLostError as exc:
            owner.node_lost(str(exc))


"""Node label: where that node's engine listens (default /var/run/docker.sock)."""
DEFAULT_SOCKET = "/var/run/docker.sock"
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
    from concurrent.futures import ThreadPoolExecutor

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
    from sandbox_runner.backends.api import ExecSpec

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
