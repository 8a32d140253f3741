"""Warm containers: while one iteration runs, the next one's container is created and started
already, waiting for its command.

A waiting container runs `sh -c 'eval "$(cat)"'` (after the settings' entry, under tini) with
its stdin open. Its iteration begins when the host sends a few lines on that stdin - the
iteration's environment as `export`s, then `exec` of its command - and closes it. Everything
else about the container (hardening, limits, labels, mounts, network) is what a cold one gets;
only variables that must exist when the container starts (`AT_CREATE`) are set at creation.
Every iteration still gets a fresh container; the previous one is removed in the background,
and everything, the unused warm one included, is gone when `close()` returns.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.base import ExecSpec
from sandbox_runner.backends.docker.container import (
    ContainerSettings,
    DockerExecution,
    DockerSandbox,
    running,
)
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

WAITER = ("sh", "-c", 'eval "$(cat)"')
"""The command of a warm container: run what arrives on stdin, once stdin is closed."""
AT_CREATE = frozenset({"TINI_KILL_PROCESS_GROUP"})
"""Read by tini when the container starts: set at creation, not sent later."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def waiter_script(argv: Sequence[str], env: Mapping[str, str]) -> bytes:
    """What a waiting container is sent: the environment, then `exec` of `argv` (stdin: none,
    as a cold container's)."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    lines += ["exec </dev/null", f"exec {shlex.join(argv)}"]
    return ("\n".join(lines) + "\n").encode()


class WarmDockerSandbox(DockerSandbox):
    """A `DockerSandbox` that keeps the next iteration's container started and waiting."""

    def __init__(self, client: docker.DockerClient, settings: ContainerSettings) -> None:
        super().__init__(client, settings)
        self._pool: ThreadPoolExecutor | None = None
        self._next: tuple[str, Future[DockerExecution]] | None = None
        """The warm container being made (or ready), with what it was made for."""
        self._removals: list[Future[None]] = []

    def waiting_kwargs(self, spec: ExecSpec) -> dict[str, Any]:
        """`containers.create` arguments of a waiting container for iterations like `spec`."""
        kwargs = self.container_kwargs(spec)
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
        with running(execution, lambda: self._retire(execution)):
            self._next = (key, self._submit(self.launch, kwargs, spec.argv[0], None, waiting=True))
            sent = {k: v for k, v in spec.env.items() if k not in AT_CREATE}
            execution.begin(waiter_script(spec.argv, sent), spec.timeout)
            yield execution

    def _submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fks-warm")
        return self._pool.submit(fn, *args, **kwargs)

    def _take(self, key: str) -> DockerExecution | None:
        """The warm container, if it was made for `key` and is ready (waits for it)."""
        if self._next is None:
            return None
        made_for, future = self._next
        try:
            execution = future.result()  # an interrupt here leaves it to close()
        except Exception:
            # Failed in the background (it removed itself): one made now says why.
            self._next = None
            return None
        self._next = None
        if made_for == key:
            return execution
        self._retire(execution)
        return None

    def _retire(self, execution: DockerExecution) -> None:
        self._removals.append(self._submit(execution.remove))

    def close(self) -> None:
        """Remove the warm container nobody took and wait until every container is gone."""
        with deferred_signals():
            pending, self._next = self._next, None
            if pending is not None:
                with contextlib.suppress(Exception):
                    pending[1].result().remove()
            for removal in self._removals:
                with contextlib.suppress(Exception):
                    removal.result()
            self._removals.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
