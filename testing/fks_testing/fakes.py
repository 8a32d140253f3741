"""A scripted sandbox for unit tests: replays canned output instead of running anything."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sandbox_runner.backends.api import ExecResult, ExecSpec, Stream


class FakeScriptExhausted(AssertionError):
    """The code under test started more processes than the script provides for."""


@dataclass(frozen=True)
class FakeRun:
    """What one scripted process prints and how it exits."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    timed_out: bool = False
    delay: float = 0.0


Scripted = FakeRun | Callable[[ExecSpec], FakeRun]


class FakeExecution:
    def __init__(self, run: FakeRun, number: int) -> None:
        self._run = run
        self._number = number

    @property
    def id(self) -> str:
        return f"fake-{self._number}"

    @property
    def container_id(self) -> str | None:
        return None

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        if self._run.delay:
            time.sleep(self._run.delay)
        if self._run.stdout:
            yield "stdout", self._run.stdout.encode()
        if self._run.stderr:
            yield "stderr", self._run.stderr.encode()

    def metered_cost(self) -> float | None:
        """No meter sees this process's calls (the egress proxy's is the workspace's)."""
        return None

    def kill(self) -> None:
        return None

    def wait(self) -> ExecResult:
        return ExecResult(
            exit_code=self._run.exit_code, timed_out=self._run.timed_out, container_id=None
        )


class FakeSandbox:
    """Replays `script` in order; `started` records every spec it was asked to run."""

    name = "fake"

    def __init__(self, script: Iterable[Scripted]) -> None:
        self._script = list(script)
        self.started: list[ExecSpec] = []

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[FakeExecution]:
        if len(self.started) >= len(self._script):
            raise FakeScriptExhausted(
                f"fake sandbox: no scripted run left for {list(spec.argv)} "
                f"(script has {len(self._script)})"
            )
        entry = self._script[len(self.started)]
        self.started.append(spec)
        run = entry(spec) if callable(entry) else entry
        yield FakeExecution(run, len(self.started))
