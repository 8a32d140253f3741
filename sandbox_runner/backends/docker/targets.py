"""Where a run's steps run, chosen once per run (`target_for`): the local engine
(`LocalTarget`), a remote engine (`RemoteTarget`), or a swarm (`swarm.target`). Each target
connects to its engine, says what a step cannot have there, makes the step's workspace (which
brings its runner and its export channel: `workspace/`), and removes what the run left, at
its end and for `fks clean`. Nothing else asks which one it is.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.checks import check_api_url, check_off_machine
from sandbox_runner.backends.docker.cleanup import clean_engine, connected, engines_used
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.engine.client import ping
from sandbox_runner.backends.docker.engine.connect import engine_client
from sandbox_runner.backends.docker.settings import docker_network
from sandbox_runner.backends.docker.swarm.target import SwarmTarget
from sandbox_runner.backends.docker.target import Leftovers, Target, Warn
from sandbox_runner.backends.docker.workspace.reaper import remove_in_background
from sandbox_runner.backends.docker.workspace.shipping import (
    ShippedObjects,
    objects_volume_name,
)
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import FksError
from sandbox_runner.git.bundles import drop_run_refs
from sandbox_runner.images.lookup import image_exists
from sandbox_runner.images.push import TRANSFER_TIMEOUT_S, push_image
from sandbox_runner.labels import LABEL_IMAGE
from sandbox_runner.plan.engine import EngineSpec

if TYPE_CHECKING:
    import docker

    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings


def target_for(spec: EngineSpec | None) -> Target:
    """The target of engine `spec` (None: the local engine)."""
    if spec is None or spec.is_local:
        return LocalTarget()
    if spec.kind == "swarm":
        return SwarmTarget(spec)
    return RemoteTarget(spec)


def clean_dead_runs(leftovers: Leftovers) -> int:
    """What dead runs left on the local engine and on every other one a dead run used; how
    many things were removed."""
    count = 0
    for engine in engines_used(leftovers):
        try:
            target = target_for(None if engine is None else EngineSpec.parse(engine))
        except FksError as exc:
            print(f"warning: skipped engine {engine} of earlier runs: {exc}")
            continue
        count += target.clean(leftovers)
    return count


def _drop_refs(run_id: str, done: list[VolumeWorkspace]) -> None:
    for workspace in done:
        drop_run_refs(workspace.repo, run_id)


class LocalTarget:
    """The local engine: it sees this machine's paths and the user's object store."""

    def connect(self) -> docker.DockerClient:

        client = docker_client()
        ping(client)
        return client

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """A model API of the step's (its CLI's, or `sandbox.modelApis`) the container can
        reach: not at this machine's loopback."""
        from sandbox_runner.backends.docker.egress.upstream import API_KINDS, api_kinds

        network = docker_network(settings)
        for kind in api_kinds(agent, settings):
            variable = API_KINDS[kind].base_url_var
            check_api_url(os.environ.get(variable), network=network, variable=variable)

    def egress_proxy(self, client: docker.DockerClient, **options: Any) -> EgressProxy:
        """A container beside the step's, on this engine."""
        return EgressProxy(client, **options)

    def present(self, client: docker.DockerClient, image: str) -> None:
        """The engine's own images are the ones."""

    def recorded_engine(self) -> str | None:
        """The local engine is the default: nothing to note."""
        return None

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
        a large checkout); a kept one (`sandbox.keepWorkspace`) stays."""

        done = [w for w in workspaces if w.name not in kept]
        _drop_refs(run_id, done)
        done = [w for w in done if not w.lasting]
        if remove_in_background([w.name for w in done]):
            return
        for workspace in done:
            workspace.remove()

    def clean(self, leftovers: Leftovers) -> int:
        client = connected(lambda: docker_client(timeout=30), None)
        return 0 if client is None else clean_engine(client, self, None, leftovers)


class RemoteTarget(LocalTarget):
    """Another engine (tcp://, ssh://, a Docker context): it cannot see this machine's paths,
    so the user's objects are sent to a volume there and images pushed to it."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def connect(self) -> docker.DockerClient:

        return engine_client(self.spec)

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """What a remote engine cannot have: paths of this machine, a model API on it."""
        check_off_machine(str(self.spec), settings, where, agent)

    def present(self, client: docker.DockerClient, image: str) -> None:
        """The image as the local engine has it, sent there if it is not (by id: `fks image
        push`); an image only the remote engine has is used as it is."""

        local = docker_client(timeout=TRANSFER_TIMEOUT_S)
        if not image_exists(local, image):
            return
        push_image(local, client, image, engine=self.spec, out=sys.stderr, quiet=True)

    def recorded_engine(self) -> str | None:
        return str(self.spec)

    def workspace(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: dict[str, str],
        image: str,
    ) -> VolumeWorkspace:
        """Its objects: the engine cannot see the user's, so they are sent."""

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

    def clean(self, leftovers: Leftovers) -> int:
        client = connected(lambda: engine_client(self.spec, timeout=60), str(self.spec))
        if client is None:
            return 0
        return clean_engine(client, self, str(self.spec), leftovers)
