"""Agents as host processes, in place: `LocalBackend` (steps run in the project directory) and
`LocalSandbox` (each agent in its own session so the whole process group can be killed)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO

from sandbox_runner.backends.api import (
    INTERRUPT_GRACE,
    ExecResult,
    ExecSpec,
    Notices,
    PreparedStep,
    RunPlace,
    Sandbox,
    StepSoFar,
    Stream,
)
from sandbox_runner.errors import AgentNotFoundError, Interrupted
from sandbox_runner.git.runner import git_toplevel, workspace_fingerprint
from sandbox_runner.plan.agents import AgentCommand, refuse_claude_as_root, resolve_agent
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.dsl import Step

_READ_SIZE = 1 << 16
_KILL_GRACE = 2.0
# After the agent exits, output still held open by a stray grandchild is read this long.
_DRAIN_GRACE = 0.5


class LocalExecution:
    """A running local process; output is read from its pipes with `selectors`."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float | None) -> None:
        self._proc = proc
        self._deadline = time.monotonic() + timeout if timeout else None
        self._timed_out = False

    @property
    def id(self) -> str:
        return str(self._proc.pid)

    @property
    def container_id(self) -> str | None:
        return None

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        proc = self._proc
        assert proc.stdout is not None and proc.stderr is not None
        pipes: dict[int, Stream] = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        with selectors.DefaultSelector() as selector:
            for fd in pipes:
                selector.register(fd, selectors.EVENT_READ)
            exited_at: float | None = None
            while pipes:
                wait = 0.25
                if self._deadline is not None:
                    wait = max(0.0, min(wait, self._deadline - time.monotonic()))
                events = selector.select(wait)
                for key, _ in events:
                    data = os.read(key.fd, _READ_SIZE)
                    if data:
                        yield pipes[key.fd], data
                    else:
                        selector.unregister(key.fd)
                        del pipes[key.fd]
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    self._timed_out = True
                    self.kill()
                    return
                if not events and proc.poll() is not None:
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > _DRAIN_GRACE:
                        return

    def wait(self) -> ExecResult:
        code = self._proc.wait()
        if code < 0:  # killed by a signal: report it the way shells do
            code = 128 - code
        return ExecResult(exit_code=code, timed_out=self._timed_out)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the agent's process group first, as a terminal would."""
        if self._proc.poll() is None:
            self._signal_group(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(INTERRUPT_GRACE)

    def metered_cost(self) -> float | None:
        """No meter sees this process's calls (the egress proxy's is the workspace's)."""
        return None

    def kill(self) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after a grace period."""
        if self._proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_KILL_GRACE)
        self._signal_group(signal.SIGKILL)
        self._proc.wait()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def close(self) -> None:
        self.kill()
        for pipe in (self._proc.stdout, self._proc.stderr):
            _close(pipe)


def _close(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        pipe.close()


class LocalSandbox:
    """Runs agents on the host, in the spec's cwd, with the host environment plus the spec's."""

    name = "local"

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[LocalExecution]:
        env = {**os.environ, **spec.env}
        try:
            proc = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise AgentNotFoundError(
                f"cannot run '{spec.argv[0]}': not found (cwd {spec.cwd})"
            ) from None
        except PermissionError:
            raise AgentNotFoundError(f"cannot run '{spec.argv[0]}': permission denied") from None
        execution = LocalExecution(proc, spec.timeout)
        try:
            yield execution
        except (Interrupted, KeyboardInterrupt):
            execution.interrupt()
            raise
        finally:
            execution.close()


class LocalBackend:
    """Agents run as host processes, in place, in the project directory."""

    def __init__(
        self, *, cwd: Path, agents: dict[str, AgentConfig], sandbox: Sandbox | None = None
    ) -> None:
        self._cwd = cwd
        self._agents = agents
        self._sandbox = sandbox or LocalSandbox()
        self._progress: Callable[[], str | None] | None = None
        self._probed = False

    @property
    def base_branch(self) -> str | None:
        return None

    def resolve(self, step: Step) -> AgentCommand:
        return resolve_agent(step.agent, agents=self._agents, cwd=self._cwd)

    def describe(self) -> list[str]:
        return []

    def planned(self, command: AgentCommand) -> tuple[AgentCommand, str]:
        return command, str(command.cwd)

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        return None

    def preflight(self, steps: list[Step]) -> None:
        for step in steps:
            refuse_claude_as_root(self.resolve(step))

    def session(
        self, run_id: str, reporter: Notices, *, resumed: bool = False
    ) -> AbstractContextManager[RunPlace]:
        """Nothing to set up: steps run in place, on no branch of their own."""
        return nullcontext(RunPlace())

    def review_hint(self, record: StepSoFar) -> list[str]:
        return []

    @contextmanager
    def step(self, index: int, step: Step, record: StepSoFar) -> Iterator[PreparedStep]:
        if not self._probed:  # one git call, only once something really runs
            self._progress, self._probed = _git_progress_probe(self._cwd), True
        yield PreparedStep(agent=self.resolve(step), sandbox=self._sandbox, progress=self._progress)


def _git_progress_probe(cwd: Path) -> Callable[[], str | None] | None:
    top = git_toplevel(cwd)
    if top is None:
        return None
    return lambda: workspace_fingerprint(top)
