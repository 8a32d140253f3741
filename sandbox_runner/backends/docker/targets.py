"""Where a run's steps run, chosen once per run (`target_for`): the local engine, a remote
engine, or a swarm. Each target connects to its engine, says what a step cannot have there,
makes the step's workspace (which brings its runner and its export channel: `workspace/`),
and removes what the run left, at its end and for `fks clean`. Nothing else asks which one
it is.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.checks import is_loopback
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.egress.upstream import ApiUpstream
from sandbox_runner.backends.docker.settings import config_files, docker_network
from sandbox_runner.backends.docker.target import Target, Warn
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.errors import FksError, SandboxError
from sandbox_runner.git.bundles import drop_run_refs
from sandbox_runner.labels import LABEL_IMAGE, LABEL_RUN

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.workspace.swarm import PackServer
    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.engine import EngineSpec
    from sandbox_runner.plan.sandbox import SandboxSettings
    from sandbox_runner.records.record import RunRecord
    from sandbox_runner.records.store import ActiveRun


def target_for(spec: EngineSpec | None) -> Target:
    """The target of engine `spec` (None: the local engine)."""
    if spec is None or spec.is_local:
        return LocalTarget()
    if spec.kind == "swarm" and spec.url is None:
        return SwarmTarget(spec)
    return RemoteTarget(spec)


def clean_dead_runs(repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
    """What dead runs of `repos` (`every`: of every repository) left on the local engine and
    on every other one a run that is not running used; how many things were removed."""
    from sandbox_runner.backends.docker.cleanup import engines_used
    from sandbox_runner.plan.engine import EngineSpec

    count = 0
    for engine in engines_used(records):
        try:
            target = target_for(None if engine is None else EngineSpec.parse(engine))
        except FksError as exc:
            print(f"warning: skipped engine {engine} of earlier runs: {exc}")
            continue
        count += target.clean(repos, records, every)
    return count


def _drop_refs(run_id: str, done: list[VolumeWorkspace]) -> None:
    for workspace in done:
        drop_run_refs(workspace.repo, run_id)


class LocalTarget:
    """The local engine: it sees this machine's paths and the user's object store."""

    def connect(self) -> docker.DockerClient:
        from sandbox_runner.backends.docker.engine.client import ping
        from sandbox_runner.docker_daemon import docker_client

        client = docker_client()
        ping(client)
        return client

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        from sandbox_runner.backends.docker.checks import check_api_url

        if agent.stream_json:
            network = docker_network(settings)
            check_api_url(os.environ.get("ANTHROPIC_BASE_URL"), network=network)

    def egress_proxy(self, client: docker.DockerClient, **options: Any) -> EgressProxy:
        """A container beside the step's, on this engine."""
        return EgressProxy(client, **options)

    def present(self, client: docker.DockerClient, image: str) -> None:
        """The engine's own images are the ones."""

    def record(self, run: ActiveRun) -> None:
        """The local engine is the default: nothing to note."""

    def open(self, stack: ExitStack) -> None:
        """Nothing runs on this side."""

    def workspace(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: dict[str, str],
        image: str,
    ) -> VolumeWorkspace:
        return VolumeWorkspace(client, repo, name, {**labels, LABEL_IMAGE: image})

    def warm(self, iterations: int) -> int:
        return iterations

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
        """Finished workspaces are removed in the background (Docker takes seconds to delete
        a large checkout)."""
        from sandbox_runner.backends.docker.workspace.reaper import remove_in_background

        done = [w for w in workspaces if w.name not in kept]
        _drop_refs(run_id, done)
        if remove_in_background([w.name for w in done]):
            return
        for workspace in done:
            workspace.remove()

    def clean(self, repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
        from sandbox_runner.backends.docker.cleanup import clean_engine, connected
        from sandbox_runner.docker_daemon import docker_client

        client = connected(lambda: docker_client(timeout=30), None)
        return 0 if client is None else clean_engine(client, self, None, repos, records, every)


class RemoteTarget(LocalTarget):
    """Another engine (tcp://, ssh://, a Docker context): it cannot see this machine's paths,
    so the user's objects are sent to a volume there and images pushed to it."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def connect(self) -> docker.DockerClient:
        from sandbox_runner.backends.docker.engine.connect import engine_client

        return engine_client(self.spec)

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """What a remote engine cannot have: paths of this machine, a model API on it."""
        if settings.mounts:
            raise SandboxError(
                f"{where}.mounts: engine {self.spec} cannot see this machine's paths "
                f"({settings.mounts[0]}); remove sandbox.mounts or run on the local engine"
            )
        if files := config_files(agent):
            raise SandboxError(
                f"agent '{agent.name}': its Claude config file {files[0]} would be mounted from "
                f"this machine, which engine {self.spec} cannot see; run it on the local engine"
            )
        api = ApiUpstream.from_env(os.environ) if agent.stream_json else None
        if api is not None and is_loopback(api.host):
            raise SandboxError(
                f"ANTHROPIC_BASE_URL {api.url} is on this machine, which containers on engine "
                f"{self.spec} cannot reach; give an address that engine reaches"
            )

    def present(self, client: docker.DockerClient, image: str) -> None:
        """The image as the local engine has it, sent there if it is not (by id: `fks image
        push`); an image only the remote engine has is used as it is."""
        from sandbox_runner.docker_daemon import docker_client
        from sandbox_runner.images.lookup import image_exists
        from sandbox_runner.images.push import TRANSFER_TIMEOUT_S, push_image

        local = docker_client(timeout=TRANSFER_TIMEOUT_S)
        if not image_exists(local, image):
            return
        push_image(local, client, image, engine=self.spec, out=sys.stderr, quiet=True)

    def record(self, run: ActiveRun) -> None:
        run.set_engine(str(self.spec))

    def workspace(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: dict[str, str],
        image: str,
    ) -> VolumeWorkspace:
        """Its objects: the engine cannot see the user's, so they are sent."""
        from sandbox_runner.backends.docker.workspace.shipping import (
            ShippedObjects,
            objects_volume_name,
        )

        shipped = ShippedObjects(
            client, repo, objects_volume_name(name), image=image, labels=labels
        )
        return VolumeWorkspace(client, repo, name, {**labels, LABEL_IMAGE: image}, shipped=shipped)

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
        """Finished workspaces, with the objects shipped there, removed now."""
        done = [w for w in workspaces if w.name not in kept]
        _drop_refs(run_id, done)
        for workspace in done:
            workspace.remove()

    def clean(self, repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
        from sandbox_runner.backends.docker.cleanup import clean_engine, connected
        from sandbox_runner.backends.docker.engine.connect import engine_client

        client = connected(lambda: engine_client(self.spec, timeout=60), str(self.spec))
        if client is None:
            return 0
        return clean_engine(client, self, str(self.spec), repos, records, every)


class SwarmTarget(RemoteTarget):
    """A swarm this machine manages: each iteration a service on some node, its workspace
    pinned to the node it landed on, its base fetched from this machine over HTTP."""

    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec)
        self._manager: str | None = None
        self._packs: PackServer | None = None
        self._placed: dict[str, str] = {}
        """Workspace volumes known to be on a node (by `fks clean`): name -> node id."""

    def place(self, workspace: str, node: str) -> None:
        """Workspace volume `workspace` is on `node` (its services are pinned there)."""
        self._placed[workspace] = node

    def connect(self) -> docker.DockerClient:
        from sandbox_runner.backends.docker.workspace.swarm import manager_address

        client = LocalTarget.connect(self)
        self._manager = manager_address(client)
        return client

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """Also: a swarm service cannot choose its runtime."""
        if settings.runtime:
            raise SandboxError(
                f"{where}.runtime: a swarm's services run under each node's default runtime, "
                f"not '{settings.runtime}'; remove sandbox.runtime (or make it the nodes' "
                "default-runtime), or run on a single engine (tcp://, ssh://)"
            )
        super().check_step(settings, where, agent)

    def egress_proxy(self, client: docker.DockerClient, **options: Any) -> EgressProxy:
        """A global service: one proxy on every node, beside whichever task lands there."""
        from sandbox_runner.backends.docker.egress.swarm import SwarmEgressProxy

        return SwarmEgressProxy(client, **options)

    def present(self, client: docker.DockerClient, image: str) -> None:
        """On every node whose engine fks reaches (node label fks.docker-engine), sent there
        if it lacks it (by id, as `fks image push --engine swarm` does)."""
        from sandbox_runner.backends.docker.engine.connect import engine_client
        from sandbox_runner.images.push import push_to_swarm

        push_to_swarm(client, [image], connect=engine_client, out=sys.stderr)

    def open(self, stack: ExitStack) -> None:
        """The server its nodes fetch workspace bases from."""
        from sandbox_runner.backends.docker.workspace.swarm import PackServer

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
        from sandbox_runner.backends.docker.workspace.shipping import (
            Placement,
            objects_volume_name,
        )
        from sandbox_runner.backends.docker.workspace.swarm import SwarmObjects, SwarmWorkspace

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
        from sandbox_runner.backends.docker.runners.service import remove_run_services
        from sandbox_runner.backends.docker.workspace.swarm import sweep_volumes

        remove_run_services(client, run_id)
        try:
            sweep_volumes(client, [f"{LABEL_RUN}={run_id}"], image)
        except FksError as exc:
            warn(f"could not remove the run's volumes on the swarm: {exc}")
        kept.clear()
        super().release(client, run_id, workspaces, kept, image=image, warn=warn)

    def clean(self, repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
        from sandbox_runner.backends.docker.cleanup import clean_swarm, connected

        client = connected(self.connect, str(self.spec))
        if client is None:
            return 0
        with ExitStack() as stack:
            self.open(stack)  # workspaces' bases are fetched from here to save their work
            return clean_swarm(client, self, str(self.spec), repos, records, every)
