"""Iterations on a Docker Swarm: each one a single-task service (replicas 1, restart policy
none) placed by Swarm or pinned to a node, its output read from the service's log stream and
its exit code from the task's status (`execution.py`); the service is removed after the
iteration.

The mode is `replicated`, not `replicated-job`: on Docker 20.10 removing a job leaves its task
and its exited container on the node (moby/moby#42789), removing a replicated service does not.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import INTERRUPT_GRACE, ExecSpec
from sandbox_runner.backends.docker.checks import memory_bytes
from sandbox_runner.backends.docker.engine.client import with_retries
from sandbox_runner.backends.docker.runners.container import ContainerSettings
from sandbox_runner.backends.docker.runners.iteration import running
from sandbox_runner.backends.docker.swarm.execution import STOP_GRACE, ServiceExecution
from sandbox_runner.backends.docker.swarm.task_network import (
    StepNetwork,
    make_network,
    remove_network,
)
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker


def _tmpfs(options: str) -> dict[str, int]:
    """`mode=` and `size=` of tmpfs mount options. Docker 20.10 takes no other option for a
    service's tmpfs, which is then `noexec`; a local-driver tmpfs volume would keep `exec`,
    but the node never removes such a volume (one left behind per mount and iteration)."""
    found: dict[str, int] = {}
    for option in options.split(","):
        key, _, value = option.partition("=")
        if key == "mode" and re.fullmatch(r"[0-7]{1,4}", value):
            found["Mode"] = int(value, 8)
        elif key == "size" and (size := memory_bytes(value)) is not None:
            found["SizeBytes"] = size
    return found


class ServiceSandbox:
    """Runs each ExecSpec as a swarm service configured by `settings`, on any node or on
    `node` (a node id). `client` talks to a manager of the swarm."""

    name = "swarm"

    def __init__(
        self,
        client: docker.DockerClient,
        settings: ContainerSettings,
        *,
        node: str | None = None,
        network: StepNetwork | None = None,
    ) -> None:
        """`network`: the step's, shared by its tasks that are to reach nothing (without it,
        each such task gets a network of its own, removed with it)."""
        self._client = client
        self._settings = settings
        self._node = node
        self._shared = network

    def task_template(self, spec: ExecSpec) -> dict[str, Any]:
        """The service's TaskTemplate (API 1.41): the container's hardening where Swarm has it."""
        s = self._settings
        container: dict[str, Any] = {
            "Image": self._image(),
            "Command": [*s.entry, *spec.argv],
            "Env": [f"{key}={value}" for key, value in spec.env.items()],
            "Dir": str(spec.cwd),
            "User": s.user,
            "Labels": self.labels(spec),
            "Mounts": self._mounts(),
            "ReadOnly": s.read_only,
            "CapabilityDrop": ["ALL"],
            "Init": True,
            "TTY": False,
            "StopSignal": "SIGINT",
            "StopGracePeriod": int((INTERRUPT_GRACE + STOP_GRACE) * 1e9),
        }
        template: dict[str, Any] = {
            "ContainerSpec": container,
            "Resources": self._resources(),
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
        }
        if self._node:
            template["Placement"] = {"Constraints": [f"node.id=={self._node}"]}
        return template

    def labels(self, spec: ExecSpec) -> dict[str, str]:
        return {**self._settings.labels, **spec.labels}

    def _image(self) -> str:
        """The image by id when the manager has it: a node then runs exactly that image and
        does not try to pull it from a registry first (which, offline, takes ~20 s)."""
        import docker.errors

        image = self._settings.image
        if image.startswith("sha256:"):
            return image
        with contextlib.suppress(docker.errors.ImageNotFound):
            return str(self._client.images.get(image).id)
        return image

    def _mounts(self) -> list[dict[str, Any]]:
        s = self._settings
        mounts: list[dict[str, Any]] = []
        for m in s.mounts:
            if not m.volume:
                raise SandboxError(
                    f"cannot mount {m.source} into a swarm task: it runs on another machine and "
                    "cannot see this host's paths; only volumes can be mounted on a swarm"
                )
            mounts.append(
                {
                    "Type": "volume",
                    "Source": m.source,
                    "Target": m.target or m.source,
                    "ReadOnly": m.read_only,
                    # A volume the node makes for it carries these (how it is found and removed).
                    "VolumeOptions": {"Labels": dict(s.labels)},
                }
            )
        for target, options in s.tmpfs.items():
            mounts.append({"Type": "tmpfs", "Target": target, "TmpfsOptions": _tmpfs(options)})
        return mounts

    def _resources(self) -> dict[str, Any]:
        s = self._settings
        limits: dict[str, int] = {}
        if s.memory:
            size = memory_bytes(s.memory)
            if size is None:
                raise SandboxError(f"sandbox memory '{s.memory}' is not a size (e.g. 2g)")
            limits["MemoryBytes"] = size
        if s.cpus:
            limits["NanoCPUs"] = int(s.cpus * 1e9)
        reservations = dict(limits)  # Swarm places tasks only where this much is free
        if s.pids_limit:
            limits["Pids"] = s.pids_limit
        return {"Limits": limits, "Reservations": reservations}

    def _needs_no_network(self) -> bool:
        """Whether the task needs a network of its own that reaches nothing (network "none")."""
        network = self._settings.network
        if network == "bridge":
            return False
        if network == "none":
            return True
        raise SandboxError(
            f"sandbox network '{network}' is not supported on a swarm; "
            "use allowlist (the default), open or none"
        )

    def launch(self, spec: ExecSpec) -> ServiceExecution:
        """Create the service and follow its logs (everything removed again if that fails)."""
        needs_network = self._needs_no_network()
        template = self.task_template(spec)  # refusals (bind mounts) before anything exists
        owned: str | None = None  # a network of the task's own, removed with it
        try:
            if needs_network:
                template["Networks"] = [{"Target": self._no_network(spec, template)}]
                if self._shared is None:
                    owned = template["Networks"][0]["Target"]
            service_id = self._create(template, self.labels(spec))
        except BaseException:
            if owned is not None:
                with deferred_signals():
                    remove_network(self._client, owned)
            raise
        execution = ServiceExecution(
            self._client, service_id, spec.timeout, network_id=owned, node=self._node
        )
        execution.argv0 = spec.argv[0]
        try:
            execution.follow()
        except BaseException:
            with deferred_signals():
                execution.remove()
            raise
        return execution

    def _no_network(self, spec: ExecSpec, template: dict[str, Any]) -> str:
        """The network of a task that is to reach nothing (see `task_network.py`): the step's
        when it shares one, else one of the task's own."""
        labels = self.labels(spec)
        if self._shared is None:
            return make_network(self._client, labels)
        image = str(template["ContainerSpec"]["Image"])
        return self._shared.join(labels, self._node, image)

    def _create(self, template: dict[str, Any], labels: Mapping[str, str]) -> str:
        import docker.errors

        mode = {"Replicated": {"Replicas": 1}}
        try:
            created = with_retries(
                "service create",
                lambda: self._client.api.create_service(template, labels=dict(labels), mode=mode),
            )
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"Docker could not create the swarm service: {one_line(str(exc.explanation or exc))}"
            ) from None
        return str(created["ID"])

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[ServiceExecution]:
        """The iteration's service; Ctrl-C removes it, and so does leaving the block."""
        execution = self.launch(spec)
        with running(execution, execution.remove):
            yield execution

    def close(self) -> None:
        """Nothing outlives an iteration here."""
