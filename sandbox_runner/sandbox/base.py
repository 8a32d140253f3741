"""The `Sandbox` protocol every backend implements, and the value objects it exchanges."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class ExecSpec:
    """One agent process to run: one iteration."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment: added to the host's locally; the *only* environment in a container."""
    timeout: float | None = None
    """Seconds before the process is killed and the iteration counts as timed out."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Metadata (container labels in Docker)."""


@dataclass(frozen=True)
class ExecResult:
    """How a process ended."""

    exit_code: int
    timed_out: bool = False
    container_id: str | None = None
    oom_limit: str | None = None
    """The memory limit the process was killed for exceeding (None: it was not OOM-killed)."""


class Execution(Protocol):
    """A started process. Leaving its context stops it and releases everything it holds."""

    @property
    def id(self) -> str:
        """Process id or container id."""
        ...

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        """Raw output as it arrives, until the process has exited and its output is drained.

        Enforces the spec's timeout: on expiry the process is killed and iteration ends.
        """
        ...

    def wait(self) -> ExecResult:
        """Exit status (after `chunks()` is exhausted)."""
        ...


class Sandbox(Protocol):
    """Runs `ExecSpec`s. The loop and chain code does not know which backend it has."""

    name: str

    def start(self, spec: ExecSpec) -> AbstractContextManager[Execution]:
        """Start the process; the context manager stops and removes it on exit, always."""
        ...
