"""What a step's sandbox asks of a running iteration, wherever it runs: an `Execution` that
also says how its end is known (`Iteration`), started by an `IterationRunner` (within
`running`: interrupted on Ctrl-C, removed when left), and the error an iteration raises when
the place it ran on went away (`PlaceLostError`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from sandbox_runner.backends.api import Execution
from sandbox_runner.errors import Interrupted, SandboxError
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    from sandbox_runner.backends.api import ExecSpec


class PlaceLostError(SandboxError):
    """The place an iteration ran on went away before the iteration ended: it is incomplete,
    and its step goes on elsewhere."""


class Iteration(Execution, Protocol):
    """A started iteration of a sandboxed step."""

    @property
    def report_ends_it(self) -> bool:
        """Whether its script's report of exit 0, once its output has ended, is its end: the
        engine need not be waited for. False: its end is asked of the engine."""
        ...

    def settle(self) -> None:
        """Its script's closing line came: nothing follows it, and no late output is waited
        for once it has ended."""
        ...


class IterationRunner(Protocol):
    """Starts a step's iterations (in containers, or as services on a node of several)."""

    def start(self, spec: ExecSpec) -> AbstractContextManager[Iteration]:
        """Start it; the context manager stops and removes it on exit, always."""
        ...


class _Interruptible(Protocol):
    def interrupt(self) -> None: ...


_E = TypeVar("_E", bound=_Interruptible)


@contextmanager
def running(execution: _E, retire: Callable[[], None]) -> Iterator[_E]:
    """An iteration's container or service: Ctrl-C interrupts it, leaving the block `retire`s
    it (removes it), on success, failure and Ctrl-C alike."""
    try:
        yield execution
    except (Interrupted, KeyboardInterrupt):
        with deferred_signals():
            execution.interrupt()
        raise
    finally:
        with deferred_signals():
            retire()
