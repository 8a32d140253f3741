"""What the engine tells whoever shows the run: the events of steps and iterations as they
happen. The engine depends on this protocol; `ui`'s reporters implement it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.backends.api import Notices, Stream

if TYPE_CHECKING:
    from sandbox_runner.agentclis.events import Event
    from sandbox_runner.results.ended import IterationResult, StepOutcome


class Reporter(Notices, Protocol):
    """Receives the run's events as they happen; `console.output` and `console.live` implement it."""

    def step_started(
        self, index: int, total: int, agent: str, iterations: int, loop: bool
    ) -> None: ...

    def iteration_started(self, number: int, maximum: int, loop: bool) -> None: ...

    def output(self, stream: Stream, chunk: bytes) -> None:
        """Raw output of a plain agent (already masked)."""
        ...

    def events(self, events: Sequence[Event]) -> None:
        """Parsed progress of a Claude agent."""
        ...

    def iteration_ended(self, result: IterationResult) -> None: ...

    def step_ended(self, agent: str, outcome: StepOutcome, loop: bool) -> None: ...

    def chain_ended(self, complete: bool, done: int, total: int, cost: float | None) -> None:
        """The run's closing line (`console.output.closing_line`)."""
        ...

    def close(self) -> None: ...
