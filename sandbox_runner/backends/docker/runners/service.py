"""Iterations on a Docker Swarm: each one a single-task service (replicas 1, restart policy
none) placed by Swarm or pinned to a node, its output read from the service's log stream and
its exit code from the task's status; the service is removed after the iteration.

The mode is `replicated`, not `replicated-job`: on Docker 20.10 removing a job leaves its task
and its exited container on the node (moby/moby#42789), removing a replicated service does not.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import INTERRUPT_GRACE, ExecResult, ExecSpec, Stream
from sandbox_runner.backends.docker.checks import memory_bytes
from sandbox_runner.backends.docker.engine.client import remove_tolerant, with_retries
from sandbox_runner.backends.docker.runners.container import ContainerSettings, running
from sandbox_runner.backends.docker.runners.log_stream import LogPump
from sandbox_runner.backends.docker.runners.task_network import (
    NO_NETWORK_ROLE,
    StepNetwork,
    make_network,
    remove_network,
)
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import AgentNotFoundError, FksError, SandboxError
from sandbox_runner.labels import LABEL_ROLE, LABEL_RUN
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

_POLL_S = 0.5
_SETTLED_POLL_S = 0.1  # once the last line came, the task is about to end
_STOP_GRACE = 2.0
_KILLED = 137
_ENDED = frozenset({"complete", "failed", "rejected", "shutdown", "remove", "orphaned"})


class NodeLostError(SandboxError):
    """The swarm node running an iteration went down (or Swarm stopped its task) before the
    iteration ended."""


@dataclass(frozen=True)
class _Task:
    """What the manager says about the service's task."""

    state: str = "new"
    node: str | None = None
    container: str | None = None
    exit_code: int | None = None
    error: str = ""


class ServiceExecution:
    """One iteration's service: its output from the log stream, its end from the task."""

    def __init__(
        self,
        client: docker.DockerClient,
        service_id: str,
        timeout: float | None,
        *,
        network_id: str | None = None,
        node: str | None = None,
    ) -> None:
        self._client = client
        self._service = service_id
        self._network = network_id
        self._pinned = node
        self._deadline = time.monotonic() + timeout if timeout else None
        self._timed_out = False
        self._task = _Task()
        self._next_poll = 0.0
        self._logs = LogPump(client, service_id)
        self._finishing = False
        self._removed = False
        self._stderr_head = b""
        self._settled_at: float | None = None
        self.argv0 = ""

    @property
    def id(self) -> str:
        return self._service

    @property
    def container_id(self) -> str | None:
        return self._task.container

    @property
    def node_id(self) -> str | None:
        """The node the task was placed on (None until Swarm has placed it)."""
        return self._task.node

    def follow(self) -> None:
        self._logs.start()

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        while True:
            try:
                item = self._logs.chunks.get(timeout=self._wait_s())
            except queue.Empty:
                item = ("stdout", b"")  # nothing came: check the clock and the task
            if item is None:
                return
            if isinstance(item, BaseException):
                if self._finishing or self._timed_out:
                    return
                self._check_task(force=True)
                raise SandboxError(
                    f"lost the log stream of service {self.id[:12]}: {one_line(item)}"
                )
            if item[1]:
                if item[0] == "stderr" and len(self._stderr_head) < 1024:
                    self._stderr_head += item[1][:1024]
                yield item
            if self._timed_out_now():
                self._timed_out = True
                self.kill()
                self._drain(_STOP_GRACE)
                return
            self._check_task()

    def settle(self) -> None:
        """The iteration's last line came (its script's report): its end is near, and no
        late output is waited for once it has ended."""
        self._logs.settle()
        self._settled_at = time.monotonic()

    def _poll_s(self) -> float:
        """How often the task is looked at: more often for a while once its last line came
        (an agent that printed a line like it early gets the usual pace back)."""
        settled = self._settled_at is not None and time.monotonic() - self._settled_at < 5
        return _SETTLED_POLL_S if settled else _POLL_S

    def _wait_s(self) -> float:
        wait = self._poll_s()
        if self._deadline is not None and not self._finishing:
            wait = min(wait, self._deadline - time.monotonic())
        return max(0.01, wait)

    def _timed_out_now(self) -> bool:
        return (
            not self._finishing
            and self._deadline is not None
            and time.monotonic() >= self._deadline
        )

    def _drain(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                if self._logs.chunks.get(timeout=0.1) is None:
                    return
        self._logs.close()

    def _check_task(self, *, force: bool = False) -> None:
        """Every `_POLL_S`: the task's state, and its node's. An ended task finishes the log
        stream; a node gone down (or a task Swarm stopped) raises NodeLostError."""
        now = time.monotonic()
        if self._finishing or (now < self._next_poll and not force):
            return
        self._next_poll = now + self._poll_s()
        self._task = self._poll_task()
        task = self._task
        node = task.node or self._pinned
        if node is not None and self._node_state(node) == "down":
            self._logs.close()
            raise NodeLostError(f"{self._node_name(node)} went down during the iteration")
        if task.state not in _ENDED:
            return
        if task.exit_code is not None and task.state in ("complete", "failed"):
            self._finishing = True
            self._logs.finish()
            return
        self._logs.close()
        if task.state in ("rejected", "failed") and "no longer meets" not in task.error:
            raise self._start_error(task)
        where = self._node_name(task.node) if task.node else "swarm"
        raise NodeLostError(
            f"{where}: Swarm stopped the iteration's task ({task.state}: {task.error or 'no reason given'})"
        )

    def _poll_task(self) -> _Task:
        tasks = with_retries("tasks", lambda: self._client.api.tasks(filters={"service": self.id}))
        if not tasks:
            return self._task
        latest = max(tasks, key=lambda t: str(t.get("CreatedAt", "")))
        status = latest.get("Status") or {}
        state = str(status.get("State", "new"))
        container = status.get("ContainerStatus") or {}
        code = container.get("ExitCode")  # 0 while the container runs: counts once it ended
        exited = state in ("complete", "failed") and container.get("ContainerID")
        return _Task(
            state=state,
            node=latest.get("NodeID") or None,
            container=container.get("ContainerID") or self._task.container,
            exit_code=int(code) if exited and code is not None else None,
            error=one_line(str(status.get("Err") or status.get("Message") or "")),
        )

    def _node_state(self, node: str) -> str:
        try:
            attrs = with_retries("node", lambda: self._client.api.inspect_node(node))
        except Exception:
            return "unknown"
        return str((attrs.get("Status") or {}).get("State", "unknown"))

    def _node_name(self, node: str) -> str:
        hostname = ""
        with contextlib.suppress(Exception):
            hostname = self._client.api.inspect_node(node)["Description"]["Hostname"]
        return f"swarm node {node[:12]}" + (f" ({hostname})" if hostname else "")

    def _start_error(self, task: _Task) -> FksError:
        where = self._node_name(task.node) if task.node else "any swarm node"
        text = task.error.lower()
        if "no such image" in text:
            return SandboxError(
                f"the image is not on {where} ({task.error}); give the node's engine URL in "
                "its label fks.docker-engine (fks then sends it the images) or send them with "
                "'fks image push --engine <that node's engine>'"
            )
        if "executable file not found" in text or ("no such file" in text and "exec" in text):
            return _agent_missing(self.argv0)
        return SandboxError(f"Swarm could not run the iteration on {where}: {task.error}")

    def wait(self) -> ExecResult:
        """The exit code from the task's status (after `chunks()` is exhausted)."""
        while not self._timed_out and self._task.exit_code is None:
            self._check_task(force=True)  # raises when the node is lost or the task cannot run
            if self._task.exit_code is None:
                time.sleep(_POLL_S)
        code = _KILLED if self._task.exit_code is None else self._task.exit_code  # timed out
        if code == 127 and b"[FATAL tini" in self._stderr_head and b"exec " in self._stderr_head:
            raise _agent_missing(self.argv0)
        # A task's status does not say whether the kernel killed it for its memory limit.
        return ExecResult(
            exit_code=code, timed_out=self._timed_out, container_id=self._task.container
        )

    def kill(self) -> None:
        """Remove the service: Swarm stops its task (SIGINT, then SIGKILL after the grace)."""
        self._remove_service()

    def interrupt(self) -> None:
        """Ctrl-C: the service goes, and with it the task (see `kill`)."""
        self._remove_service()

    def _remove_service(self) -> None:
        import docker.errors

        if self._removed:
            return
        self._removed = True
        with contextlib.suppress(docker.errors.APIError):
            remove_tolerant(lambda: self._client.api.remove_service(self.id))

    def remove(self) -> None:
        """Remove the service, stop reading its logs, remove its no-network network."""
        self._remove_service()
        self._logs.close()
        if self._network is not None:
            remove_network(self._client, self._network)


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


def _agent_missing(argv0: str) -> AgentNotFoundError:
    return AgentNotFoundError(
        f"Agent '{argv0}' not found in the image (not on its PATH, or not in the workspace); "
        "install it in the image or give a path in the repository"
    )


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
            "StopGracePeriod": int((INTERRUPT_GRACE + _STOP_GRACE) * 1e9),
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


def remove_run_services(client: docker.DockerClient, run_id: str) -> int:
    """Remove every service of run `run_id` (the keepers of its networks among them), its
    no-network networks and its secrets; returns how many services were removed."""
    wanted = {"label": f"{LABEL_RUN}={run_id}"}
    services = with_retries("services", lambda: client.api.services(filters=wanted))
    for service in services:
        remove_tolerant(functools.partial(client.api.remove_service, service["ID"]))
    networks = client.api.networks(
        filters={"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}={NO_NETWORK_ROLE}"]}
    )
    for network in networks:  # its tasks may still be stopping: they were killed just now
        remove_network(client, network["Id"], wait_s=60)
    from sandbox_runner.backends.docker.engine.client import remove_secret

    for secret in client.api.secrets(filters={"label": f"{LABEL_RUN}={run_id}"}):
        remove_secret(client, secret["ID"])
    return len(services)
