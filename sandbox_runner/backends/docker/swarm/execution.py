"""An iteration on a Docker Swarm as it runs (`ServiceExecution`): its output read from the
service's log stream, its end and its exit code from its task's status as the manager reports
it, its node watched (`NodeLostError` when that node goes down)."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecResult, Stream
from sandbox_runner.backends.docker.engine.client import remove_tolerant, with_retries
from sandbox_runner.backends.docker.runners.iteration import PlaceLostError
from sandbox_runner.backends.docker.swarm.log_stream import LogPump
from sandbox_runner.backends.docker.swarm.task_network import remove_network
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import AgentNotFoundError, FksError, SandboxError

if TYPE_CHECKING:
    import docker

_POLL_S = 0.5
_SETTLED_POLL_S = 0.1  # once the last line came, the task is about to end
STOP_GRACE = 2.0
"""Seconds a task has after SIGINT's grace before Swarm kills it, and its output is drained."""
_KILLED = 137
_ENDED = frozenset({"complete", "failed", "rejected", "shutdown", "remove", "orphaned"})


class NodeLostError(PlaceLostError):
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
                self._drain(STOP_GRACE)
                return
            self._check_task()

    @property
    def report_ends_it(self) -> bool:
        """No: a task's end is its status, asked of the manager (its container is out of
        reach, and ends some time after its last line)."""
        return False

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
        self._task = _poll_task(self._client, self.id, self._task)
        task = self._task
        node = task.node or self._pinned
        if node is not None and _node_state(self._client, node) == "down":
            self._logs.close()
            raise NodeLostError(f"{_node_name(self._client, node)} went down during the iteration")
        if task.state not in _ENDED:
            return
        if task.exit_code is not None and task.state in ("complete", "failed"):
            self._finishing = True
            self._logs.finish()
            return
        self._logs.close()
        if task.state in ("rejected", "failed") and "no longer meets" not in task.error:
            raise _start_error(self._client, task, self.argv0)
        where = _node_name(self._client, task.node) if task.node else "swarm"
        raise NodeLostError(
            f"{where}: Swarm stopped the iteration's task ({task.state}: {task.error or 'no reason given'})"
        )

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

    def metered_cost(self) -> float | None:
        """No meter sees this process's calls (the egress proxy's is the workspace's)."""
        return None

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


def _agent_missing(argv0: str) -> AgentNotFoundError:
    return AgentNotFoundError(
        f"Agent '{argv0}' not found in the image (not on its PATH, or not in the workspace); "
        "install it in the image or give a path in the repository"
    )


def _poll_task(client: docker.DockerClient, service: str, last: _Task) -> _Task:
    """What the manager says of `service`'s task now (`last` while it lists none)."""
    tasks = with_retries("tasks", lambda: client.api.tasks(filters={"service": service}))
    if not tasks:
        return last
    latest = max(tasks, key=lambda t: str(t.get("CreatedAt", "")))
    status = latest.get("Status") or {}
    state = str(status.get("State", "new"))
    container = status.get("ContainerStatus") or {}
    code = container.get("ExitCode")  # 0 while the container runs: counts once it ended
    exited = state in ("complete", "failed") and container.get("ContainerID")
    return _Task(
        state=state,
        node=latest.get("NodeID") or None,
        container=container.get("ContainerID") or last.container,
        exit_code=int(code) if exited and code is not None else None,
        error=one_line(str(status.get("Err") or status.get("Message") or "")),
    )


def _node_state(client: docker.DockerClient, node: str) -> str:
    try:
        attrs = with_retries("node", lambda: client.api.inspect_node(node))
    except Exception:
        return "unknown"
    return str((attrs.get("Status") or {}).get("State", "unknown"))


def _node_name(client: docker.DockerClient, node: str) -> str:
    hostname = ""
    with contextlib.suppress(Exception):
        hostname = client.api.inspect_node(node)["Description"]["Hostname"]
    return f"swarm node {node[:12]}" + (f" ({hostname})" if hostname else "")


def _start_error(client: docker.DockerClient, task: _Task, argv0: str) -> FksError:
    """Why Swarm could not run the task, and the fix."""
    where = _node_name(client, task.node) if task.node else "any swarm node"
    text = task.error.lower()
    if "no such image" in text:
        return SandboxError(
            f"the image is not on {where} ({task.error}); give the node's engine URL in "
            "its label fks.docker-engine (fks then sends it the images) or send them with "
            "'fks image push --engine <that node's engine>'"
        )
    if "executable file not found" in text or ("no such file" in text and "exec" in text):
        return _agent_missing(argv0)
    return SandboxError(f"Swarm could not run the iteration on {where}: {task.error}")
