"""Warm containers: while one iteration runs, the next ones' containers are created and started
already, waiting for their command.

A waiting container runs `sh -c 'eval "$(cat)"'` (after the settings' entry, under tini) with
its stdin open. Its iteration begins when the host sends a few lines on that stdin - the
iteration's environment as `export`s, then `exec` of its command - and closes it. Everything
else about the container (hardening, limits, labels, mounts, network) is what a cold one gets;
only variables that must exist when the container starts (`AT_CREATE`) are set at creation.
Every iteration still gets a fresh container; the previous one is removed in the background,
and everything, the unused warm ones included, is gone when `close()` returns.

`DEPTH` containers wait (never more than the iterations the step has left): with one, each
iteration still waits for the start of the next one's container, which costs more than a short
iteration on a busy engine; with two, a start has a whole iteration more to finish.

The iterations of a step share one network namespace, as the containers of a pod do: a small
container of its own (`sleep`, labelled `fks.role=netns`, the step's network settings and
labels, hardened like the others) holds it, and every iteration's container joins it
(`network_mode: container:…`). Making and tearing down a namespace per container (its veth,
the kernel's cleanup) cost more than all the rest of a container's start and removal. Nothing
of an iteration lives on in it: the agent has no capability to configure it, and its sockets
end with its processes, which end with its container. With the egress proxy, the holder also
runs the forwarders to it (`entry`), once for the step; an iteration's container waits until
they listen (`join_entry`). The holder goes with the step.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.backends.docker.runners.container import (
    ContainerSettings,
    DockerExecution,
    DockerSandbox,
)
from sandbox_runner.backends.docker.runners.iteration import running
from sandbox_runner.labels import LABEL_ROLE
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

WAITER = ("sh", "-c", 'eval "$(cat)"')
"""The command of a warm container: run what arrives on stdin, once stdin is closed."""
AT_CREATE = frozenset({"TINI_KILL_PROCESS_GROUP"})
"""Read by tini when the container starts: set at creation, not sent later."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEPTH = 2
"""How many containers wait, started, for the iterations to come."""
ROLE_NETNS = "netns"
"""`fks.role` of the container holding a step's network namespace."""
_HOLD = ("sleep", "2147483647")


def waiter_script(argv: Sequence[str], env: Mapping[str, str]) -> bytes:
    """What a waiting container is sent: the environment, then `exec` of `argv` (stdin: none,
    as a cold container's)."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    lines += ["exec </dev/null", f"exec {shlex.join(argv)}"]
    return ("\n".join(lines) + "\n").encode()


class WarmDockerSandbox(DockerSandbox):
    """A `DockerSandbox` that keeps the next iterations' containers started and waiting, for
    at most `iterations` iterations in all."""

    def __init__(
        self, client: docker.DockerClient, settings: ContainerSettings, iterations: int
    ) -> None:
        super().__init__(client, settings)
        self._left = iterations
        """Iterations that may still start."""
        self._pool: ThreadPoolExecutor | None = None
        self._next: deque[tuple[str, Future[DockerExecution]]] = deque()
        """The warm containers being made (or ready), oldest first, with what they were made
        for."""
        self._removals: list[Future[None]] = []
        self._netns: DockerExecution | None = None
        """The container holding the step's network namespace, once made."""

    def waiting_kwargs(self, spec: ExecSpec) -> dict[str, Any]:
        """`containers.create` arguments of a waiting container for iterations like `spec`."""
        kwargs = self.container_kwargs(spec)
        if self._settings.network != "host":  # (the host's: nothing to make)
            kwargs.pop("network", None)
            kwargs.pop("extra_hosts", None)  # the holder's /etc/hosts is the joiners'
            kwargs["network_mode"] = f"container:{self._holder(spec).id}"
            kwargs["command"] = [*self._settings.join_entry, *WAITER]
        else:
            kwargs["command"] = [*self._settings.entry, *WAITER]
        kwargs["environment"] = {k: v for k, v in spec.env.items() if k in AT_CREATE}
        kwargs["stdin_open"] = True
        return kwargs

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[DockerExecution]:
        if not all(_NAME.fullmatch(name) for name in spec.env):  # not sayable with `export`
            with super().start(spec) as execution:
                yield execution
            return
        kwargs = self.waiting_kwargs(spec)
        key = repr(kwargs)
        execution = self._take(key) or self.launch(kwargs, spec.argv[0], None, waiting=True)
        execution.argv0 = spec.argv[0]
        self._left -= 1
        with running(execution, lambda: self._retire(execution)):
            while len(self._next) < min(DEPTH, self._left):
                launch = self._submit(self.launch, kwargs, spec.argv[0], None, waiting=True)
                self._next.append((key, launch))
            sent = {k: v for k, v in spec.env.items() if k not in AT_CREATE}
            execution.begin(waiter_script(spec.argv, sent), spec.timeout)
            yield execution

    def _holder(self, spec: ExecSpec) -> DockerExecution:
        """The step's network namespace holder, made on first use with the step's network
        settings and labels (so that `fks clean` finds it after a kill -9)."""
        if self._netns is None:
            kwargs = self.container_kwargs(spec)
            # `entry` starts the egress forwarders, if any, for the step (its mounts: their socket)
            kwargs.update(command=[*self._settings.entry, *_HOLD], environment={}, working_dir="/")
            kwargs["labels"] = {**kwargs["labels"], LABEL_ROLE: ROLE_NETNS}
            self._netns = self.launch(kwargs, _HOLD[0], None)
        return self._netns

    def _submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=DEPTH + 2, thread_name_prefix="fks-warm")
        return self._pool.submit(fn, *args, **kwargs)

    def _take(self, key: str) -> DockerExecution | None:
        """The oldest warm container, if it was made for `key` and is ready (waits for it);
        made for anything else, all of them go."""
        if not self._next:
            return None
        made_for, future = self._next[0]
        try:
            execution = future.result()  # an interrupt here leaves it to close()
        except Exception:
            # Failed in the background (it removed itself): one made now says why.
            self._next.popleft()
            return None
        self._next.popleft()
        if made_for == key:
            return execution
        self._retire(execution)
        while self._next:
            self._removals.append(self._submit(_remove_when_made, self._next.popleft()[1]))
        return None

    def _retire(self, execution: DockerExecution) -> None:
        self._removals.append(self._submit(execution.remove))

    def close(self) -> None:
        """Remove the warm containers nobody took and wait until every container is gone."""
        with deferred_signals():
            while self._next:
                with contextlib.suppress(Exception):
                    self._next.popleft()[1].result().remove()
            for removal in self._removals:
                with contextlib.suppress(Exception):
                    removal.result()
            self._removals.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if self._netns is not None:  # after every container that joined it
                self._netns.remove()
                self._netns = None


def _remove_when_made(made: Future[DockerExecution]) -> None:
    with contextlib.suppress(Exception):  # failed: it removed itself
        made.result().remove()
