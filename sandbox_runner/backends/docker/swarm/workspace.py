"""Workspaces on a Docker Swarm: the manager's API is all fks talks to.

A step's workspace and its object store are volumes on one node: the first service that
mounts them (the loader of the step's base) is placed by Swarm, and every later service of the
workspace is pinned to that node (`Placement`). The loader fetches its pack over HTTP from this
machine (`packs.py`). Iterations run as services (`service.py`); their commits come back
through the service's log stream (`workspace/logged_bundle.py`).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.backends.docker.runners.container import ContainerSettings, DockerSandbox, Mount
from sandbox_runner.backends.docker.swarm.execution import NodeLostError
from sandbox_runner.backends.docker.swarm.nodes import run_script
from sandbox_runner.backends.docker.swarm.packs import PackServer
from sandbox_runner.backends.docker.swarm.service import ServiceSandbox
from sandbox_runner.backends.docker.swarm.task_network import StepNetwork
from sandbox_runner.backends.docker.workspace.export import (
    OBJECTS,
    Export,
    ExportError,
    max_bundle_bytes,
)
from sandbox_runner.backends.docker.workspace.exporting import Exporting, ExportOwner
from sandbox_runner.backends.docker.workspace.logged_bundle import LoggedBundle
from sandbox_runner.backends.docker.workspace.shipping import ShippedObjects
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.errors import SandboxError
from sandbox_runner.git.repo import Repo

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.api import Execution
    from sandbox_runner.backends.docker.runners.iteration import IterationRunner

# A loader on a node fks cannot put files on: an empty repository whose object directory is
# the volume, and the pack indexed into it with every object checked and thin deltas completed
# from what the volume holds.
_INDEX = (
    f"git init -q --bare /tmp/r; mkdir -p {OBJECTS}/pack {OBJECTS}/info; "
    f"GIT_DIR=/tmp/r GIT_OBJECT_DIRECTORY={OBJECTS} git index-pack --stdin --strict "
    "--fix-thin <{pack} >/dev/null"
)
LOADER_TIMEOUT_S = 1800


@dataclass
class Placement:
    """The swarm node a workspace's volumes are on (None until its first service ran)."""

    node: str | None = None


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

    def runner(self, containers: DockerSandbox, settings: ContainerSettings) -> IterationRunner:
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

    def export_channel(self, env: dict[str, str], nonce: str, scratch: Path) -> LoggedBundle:
        """The bundle comes through the log stream (the task's container is out of reach)."""
        env["FKS_EXPORT_VIA"] = "log"
        return LoggedBundle(nonce, scratch / f"bundle-{nonce}", limit=max_bundle_bytes())

    def read_export(self, container_id: str, scratch: Path) -> Export:
        """A swarm task's report was all there is."""
        raise ExportError("the iteration ended before it reported its work")

    def export(self, owner: ExportOwner, settings: ContainerSettings, spec: ExecSpec) -> None:
        """The same as a service pinned to the workspace's node, its report and bundle read
        from its log stream."""
        nonce = secrets.token_hex(8)
        env = {**spec.env, "FKS_NONCE": nonce}
        channel = self.export_channel(env, nonce, owner.scratch)
        # A network of its own, gone with it: a salvage may run where no step closes after it.
        runner = ServiceSandbox(self._client, settings, node=self.placement.node)
        try:
            with runner.start(replace(spec, env=env)) as execution:
                exporting = Exporting(execution, owner, "export", nonce, channel)
                for _chunk in exporting.chunks():
                    pass
                exporting.wait()
        except NodeLostError as exc:
            owner.place_lost(str(exc))
