"""Agents in disposable Docker containers (docker-py, the real engine).

One container per iteration: create → attach → start → stream → wait → remove. The container
runs as the host user, with every capability dropped and no-new-privileges, and sees only the
mounts it is given.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import INTERRUPT_GRACE, ExecResult, ExecSpec, Stream
from sandbox_runner.backends.docker.engine.client import (
    create_container,
    is_missing_executable,
    with_retries,
)
from sandbox_runner.backends.docker.runners.iteration import running
from sandbox_runner.errors import AgentNotFoundError, SandboxError
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

# What Docker itself keeps of a container's output on the host's disk (fks reads it from the
# attached stream, and bounds its own logs): a little, rotated, whatever the daemon's default.
BOUNDED_DOCKER_LOG: dict[str, Any] = {
    "type": "json-file",
    "config": {"max-size": "1m", "max-file": "1"},
}
_QUEUE_CHUNKS = 64  # bounded: a fast agent is slowed down rather than buffered in memory
_STOP_GRACE = 2


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted into the container (at the same path unless `target` is set),
    or, with `volume=True`, a named Docker volume."""

    source: str
    target: str | None = None
    read_only: bool = False
    volume: bool = False


@dataclass(frozen=True)
class ContainerSettings:
    """Everything about the containers of one step except the command."""

    image: str
    user: str
    mounts: Sequence[Mount] = ()
    network: str = "bridge"
    memory: str | None = None
    cpus: float | None = None
    pids_limit: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    read_only: bool = True
    """Read-only root filesystem; `tmpfs` paths (and the mounts) are the writable places."""
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    """Path -> tmpfs mount options."""
    entry: tuple[str, ...] = ()
    """Put before every command (e.g. what starts the egress forwarders, then `exec "$@"`)."""
    join_entry: tuple[str, ...] = ()
    """Put instead before the command of a container that joins a network namespace whose
    holder ran `entry` (e.g. what waits until the holder's forwarders listen)."""
    runtime: str | None = None
    """The engine's OCI runtime for these containers (e.g. `runsc`); None: its default."""
    gvisor: bool = False
    """`runtime` is gVisor's runsc: `pids_limit` is counted by its kernel (see `pids_kwargs`)."""


GVISOR_PIDS_PER_PROCESS = 3
"""Host tasks one process of the agent's may cost under gVisor: the stub process and thread
its address space runs in on the host, and a thread of gVisor's own while it waits on the
host (measured: 2 for a sleeping process, fewer for threads)."""
GVISOR_OWN_PIDS = 256
"""Host tasks gVisor itself runs in a container beyond them (its kernel's and file server's
threads: about 30 at rest, measured)."""


def pids_kwargs(limit: int, *, gvisor: bool) -> dict[str, Any]:
    """The `containers.create` arguments that hold the agent to `limit` processes (threads
    included), forks past it failing with EAGAIN. Under runc the container's pids cgroup
    counts them. Under gVisor that cgroup also counts gVisor's own threads, and reaching it
    ends the whole sandbox, not a fork: gVisor's kernel counts the agent's processes instead
    (RLIMIT_NPROC, for every process of the container's user), and the host's cgroup gets
    room for what gVisor itself runs on top of them, a bound only an agent that lifted its
    own count (a user namespace of its own) can reach."""
    if not gvisor:
        return {"pids_limit": limit}
    from docker.types import Ulimit

    return {
        "ulimits": [Ulimit(name="nproc", soft=limit, hard=limit)],
        "pids_limit": GVISOR_PIDS_PER_PROCESS * limit + GVISOR_OWN_PIDS,
    }


class DockerExecution:
    """A running container whose output is read by a thread into a bounded queue."""

    def __init__(
        self, client: docker.DockerClient, container: Container, timeout: float | None
    ) -> None:
        self._client = client
        self._container = container
        self._deadline = time.monotonic() + timeout if timeout else None
        self._timed_out = False
        self._chunks: queue.Queue[tuple[Stream, bytes] | BaseException | None] = queue.Queue(
            _QUEUE_CHUNKS
        )
        self._stream: Any = None
        self._stdin: Any = None
        self._stderr_head = b""
        self.argv0 = ""

    @property
    def id(self) -> str:
        return str(self._container.id)

    @property
    def container_id(self) -> str | None:
        return self.id

    @property
    def timed_out(self) -> bool:
        """fks killed it for running past its time."""
        return self._timed_out

    @property
    def report_ends_it(self) -> bool:
        """A reported exit 0 is its end unless fks killed it for its time: the container is
        ending (its stop takes tens of ms more)."""
        return not self._timed_out

    def settle(self) -> None:
        """Its output ends with the container: there is no late output to wait for."""

    def attach(self) -> None:
        """Attach before start, so not a byte of output is missed."""
        self._stream = with_retries(
            "attach",
            lambda: self._client.api.attach(
                self._container.id, stdout=True, stderr=True, stream=True, logs=True, demux=True
            ),
        )
        threading.Thread(target=self._pump, name=f"fks-logs-{self.id[:12]}", daemon=True).start()

    def attach_stdin(self) -> None:
        """A waiting container's stdin (see `warm.py`): what `begin` sends it runs."""
        self._stdin = with_retries(
            "attach",
            lambda: self._client.api.attach_socket(
                self._container.id, params={"stdin": 1, "stream": 1}
            ),
        )

    def begin(self, script: bytes, timeout: float | None) -> None:
        """Send a waiting container its command and close its stdin; the clock starts now."""
        import socket

        self._deadline = time.monotonic() + timeout if timeout else None
        raw = getattr(self._stdin, "_sock", self._stdin)
        # A container that already ended (its entry failed) tells why in its output and exit code.
        with contextlib.suppress(OSError):
            raw.sendall(script)
            raw.shutdown(socket.SHUT_WR)
        with contextlib.suppress(Exception):
            self._stdin.close()

    def _pump(self) -> None:
        try:
            for out, err in self._stream:
                if out:
                    self._chunks.put(("stdout", out))
                if err:
                    if len(self._stderr_head) < 1024:
                        self._stderr_head += err[:1024]
                    self._chunks.put(("stderr", err))
        except Exception as exc:  # surfaced to the reading thread
            self._chunks.put(exc)
        finally:
            self._chunks.put(None)

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        while True:
            wait = 0.5
            if self._deadline is not None:
                left = self._deadline - time.monotonic()
                if left <= 0:  # checked before every chunk: a chatty agent is no exception
                    self._timed_out = True
                    self.kill()
                    self._drain(grace=_STOP_GRACE)
                    return
                wait = max(0.01, min(wait, left))
            try:
                item = self._chunks.get(timeout=wait)
            except queue.Empty:
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                if self._exited():
                    return
                raise SandboxError(f"lost the output stream of container {self.id[:12]}: {item}")
            yield item

    def _drain(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                if self._chunks.get(timeout=0.1) is None:
                    return
            except queue.Empty:
                continue

    def _exited(self) -> bool:
        try:
            self._container.reload()
        except Exception:
            return True
        return self._container.status in ("exited", "dead")

    def wait(self) -> ExecResult:
        status = with_retries("wait", lambda: self._container.wait())
        code = int(status.get("StatusCode", -1))
        if code == 127 and b"[FATAL tini" in self._stderr_head and b"exec " in self._stderr_head:
            # The init process could not exec the agent: it is not in the image.
            raise AgentNotFoundError(
                f"Agent '{self.argv0}' not found in the image (not on its PATH, or not in the workspace); "
                "install it in the image or give a path in the repository"
            )
        return ExecResult(
            exit_code=code,
            timed_out=self._timed_out,
            container_id=self.id,
            oom_limit=self._oom_limit() if code != 0 and not self._timed_out else None,
        )

    def _oom_limit(self) -> str | None:
        """The memory limit, when the kernel killed a process of the container for exceeding it."""
        try:
            self._container.reload()
        except Exception:
            return None
        if not self._container.attrs.get("State", {}).get("OOMKilled"):
            return None
        limit = int(self._container.attrs.get("HostConfig", {}).get("Memory") or 0)
        return f"{limit // 2**20}m" if limit else "the machine's memory"

    def metered_cost(self) -> float | None:
        """No meter sees this process's calls (the egress proxy's is the workspace's)."""
        return None

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self._container.kill()

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the agent (tini passes it to the whole process group), then
        SIGTERM, then SIGKILL, each after a short grace."""
        with contextlib.suppress(Exception):
            self._container.kill(signal="SIGINT")
            self._container.wait(timeout=INTERRUPT_GRACE)
            return
        with contextlib.suppress(Exception):
            self._container.stop(timeout=int(_STOP_GRACE))

    def remove(self) -> None:
        import docker.errors

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                self._container.remove(force=True)

        with contextlib.suppress(docker.errors.APIError):
            with_retries("remove", remove)
        for stream in (self._stream, self._stdin):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()


class DockerSandbox:
    """Runs each ExecSpec in a fresh container configured by `settings`."""

    name = "docker"

    def __init__(self, client: docker.DockerClient, settings: ContainerSettings) -> None:
        self._client = client
        self._settings = settings

    def container_kwargs(self, spec: ExecSpec) -> dict[str, Any]:
        """The docker-py `containers.create` arguments for one iteration."""
        from docker.types import Mount as DockerMount

        s = self._settings
        kwargs: dict[str, Any] = {
            "image": s.image,
            "command": [*s.entry, *spec.argv],
            "user": s.user,
            "working_dir": str(spec.cwd),
            "environment": dict(spec.env),
            "labels": {**s.labels, **spec.labels},
            "mounts": [
                DockerMount(
                    target=m.target or m.source,
                    source=m.source,
                    type="volume" if m.volume else "bind",
                    read_only=m.read_only,
                )
                for m in s.mounts
            ],
            "read_only": s.read_only,
            "tmpfs": dict(s.tmpfs),
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "init": True,
            "log_config": BOUNDED_DOCKER_LOG,
            "tty": False,
            "stdin_open": False,
            "detach": True,
        }
        if s.network in ("bridge", "none", "host"):
            kwargs["network_mode"] = s.network
        else:
            kwargs["network"] = s.network
        if s.network not in ("none", "host"):
            kwargs["extra_hosts"] = {"host.docker.internal": "host-gateway"}
        if s.memory:
            kwargs["mem_limit"] = s.memory
            kwargs["memswap_limit"] = s.memory  # no swap: over the limit means killed, not slow
        if s.cpus:
            kwargs["nano_cpus"] = int(s.cpus * 1e9)
        if s.pids_limit:
            kwargs.update(pids_kwargs(s.pids_limit, gvisor=s.gvisor))
        if s.runtime:
            kwargs["runtime"] = s.runtime
        return kwargs

    def launch(
        self, kwargs: dict[str, Any], argv0: str, timeout: float | None, *, waiting: bool = False
    ) -> DockerExecution:
        """Create, attach to and start a container (removed again if any of that fails).
        `waiting`: it runs what it is sent on stdin (see `warm.py`)."""
        import docker.errors

        container = create_container(self._client, kwargs, stdin_once=waiting)
        execution = DockerExecution(self._client, container, timeout)
        execution.argv0 = argv0
        try:
            execution.attach()
            if waiting:
                execution.attach_stdin()
            try:
                with_retries("start", container.start)
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                if is_missing_executable(text.lower()):
                    raise AgentNotFoundError(
                        f"Agent '{argv0}' not found in the image (not on its PATH, or not in the workspace); "
                        "install it in the image or give a path in the repository"
                    ) from None
                raise SandboxError(f"Docker could not start the container: {text}") from None
        except BaseException:
            with deferred_signals():
                execution.remove()
            raise
        return execution

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[DockerExecution]:
        execution = self.launch(self.container_kwargs(spec), spec.argv[0], spec.timeout)
        with running(execution, execution.remove):
            yield execution

    def close(self) -> None:
        """Nothing outlives an iteration here (see `WarmDockerSandbox`)."""
