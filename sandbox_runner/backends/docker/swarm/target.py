"""A swarm this machine manages, as the place a run's steps run (`SwarmTarget`): each iteration
a service on some node, its workspace pinned to the node it landed on, its base fetched from
this machine over HTTP, its egress proxy a service on every node."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.checks import check_off_machine
from sandbox_runner.backends.docker.cleanup import connected
from sandbox_runner.backends.docker.engine.client import ping
from sandbox_runner.backends.docker.engine.connect import engine_client
from sandbox_runner.backends.docker.swarm.cleanup import clean_swarm, remove_run_services
from sandbox_runner.backends.docker.swarm.egress import SwarmEgressProxy
from sandbox_runner.backends.docker.swarm.nodes import sweep_volumes
from sandbox_runner.backends.docker.swarm.packs import PackServer, manager_address
from sandbox_runner.backends.docker.swarm.workspace import Placement, SwarmObjects, SwarmWorkspace
from sandbox_runner.backends.docker.target import Leftovers, Warn
from sandbox_runner.backends.docker.workspace.shipping import objects_volume_name
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import FksError, SandboxError
from sandbox_runner.git.bundles import drop_run_refs
from sandbox_runner.images.push import push_to_swarm
from sandbox_runner.labels import LABEL_IMAGE, LABEL_RUN

if TYPE_CHECKING:
    import docker

    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.engine import EngineSpec
    from sandbox_runner.plan.sandbox import SandboxSettings


class SwarmTarget:
    """A swarm this machine manages (engine `swarm`): reached through this machine's engine,
    its manager; its nodes, like a remote engine, cannot see this machine's paths."""

    def __init__(self, spec: EngineSpec) -> None:
        if spec.url is not None:
            raise SandboxError(
                f"sandbox engine {str(spec)!r}: a swarm managed by another engine is not "
                "supported yet; run fks on a manager of the swarm with engine 'swarm'"
            )
        self.spec = spec
        self._manager: str | None = None
        self._packs: PackServer | None = None
        self._placed: dict[str, str] = {}
        """Workspace volumes known to be on a node (by `fks clean`): name -> node id."""

    def place(self, workspace: str, node: str) -> None:
        """Workspace volume `workspace` is on `node` (its services are pinned there)."""
        self._placed[workspace] = node

    def connect(self) -> docker.DockerClient:
        client = docker_client()
        ping(client)
        self._manager = manager_address(client)
        return client

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """What a remote engine cannot have, and: a swarm service cannot choose its runtime."""
        if settings.runtime:
            raise SandboxError(
                f"{where}.runtime: a swarm's services run under each node's default runtime, "
                f"not '{settings.runtime}'; remove sandbox.runtime (or make it the nodes' "
                "default-runtime), or run on a single engine (tcp://, ssh://)"
            )
        check_off_machine(str(self.spec), settings, where, agent)

    def egress_proxy(self, client: docker.DockerClient, **options: Any) -> SwarmEgressProxy:
        """A global service: one proxy on every node, beside whichever task lands there."""
        return SwarmEgressProxy(client, **options)

    def present(self, client: docker.DockerClient, image: str) -> None:
        """On every node whose engine fks reaches (node label fks.docker-engine), sent there
        if it lacks it (by id, as `fks image push --engine swarm` does)."""
        push_to_swarm(client, [image], connect=engine_client, out=sys.stderr)

    def recorded_engine(self) -> str | None:
        return str(self.spec)

    def open(self, stack: ExitStack) -> None:
        """The server its nodes fetch workspace bases from."""
        assert self._manager is not None, "connect() first"
        self._packs = stack.enter_context(PackServer(self._manager))

    def workspace(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: dict[str, str],
        image: str,
    ) -> VolumeWorkspace:
        """On a swarm node, placed by Swarm."""
        assert self._packs is not None, "open() first"
        objects = SwarmObjects(
            client,
            repo,
            objects_volume_name(name),
            image=image,
            labels=labels,
            server=self._packs,
            placement=Placement(self._placed.get(name)),
        )
        return SwarmWorkspace(client, repo, name, {**labels, LABEL_IMAGE: image}, shipped=objects)

    def warm(self, iterations: int) -> int:
        return 0

    def release(
        self,
        client: docker.DockerClient,
        run_id: str,
        workspaces: list[VolumeWorkspace],
        kept: set[str],
        *,
        image: str,
        warn: Warn,
    ) -> None:
        """The run's services, and its volumes on every node (a swarm keeps no workspace for
        --resume: a resumed step starts afresh from its branch, on any node)."""
        remove_run_services(client, run_id)
        try:
            sweep_volumes(client, [f"{LABEL_RUN}={run_id}"], image)
        except FksError as exc:
            warn(f"could not remove the run's volumes on the swarm: {exc}")
        kept.clear()
        for workspace in workspaces:
            drop_run_refs(workspace.repo, run_id)

    def clean(self, leftovers: Leftovers) -> int:
        client = connected(self.connect, str(self.spec))
        if client is None:
            return 0
        with ExitStack() as stack:
            self.open(stack)  # workspaces' bases are fetched from here to save their work
            return clean_swarm(client, self, str(self.spec), leftovers)
