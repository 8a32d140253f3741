"""How iterations and steps ended: the value objects the loop produces, backends adjust
(`PreparedStep.after_iteration`, `PreparedStep.land`) and the reporters show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sandbox_runner.records.store import ClaudeStats, DeniedRecord


@dataclass(frozen=True)
class IterationResult:
    """How one iteration ended."""

    number: int
    complete: bool
    marker: bool
    reason: str
    exit_code: int | None
    started: datetime
    ended: datetime
    counted: bool = True
    container_id: str | None = None
    claude: ClaudeStats | None = None
    changed: bool | None = None
    error_tail: str | None = None
    note: str | None = None
    """A line worth showing the user (timeouts, Claude errors, back-off)."""
    denied: tuple[DeniedRecord, ...] = ()
    """Requests the egress allow-list refused during the iteration, the most refused first."""
    denied_more: int = 0
    """Requests refused to destinations not in `denied` (the list is bounded)."""

    @property
    def rate_limited(self) -> bool:
        return self.reason == "rate_limited"

    @property
    def cost_usd(self) -> float:
        return (self.claude.cost_usd or 0.0) if self.claude else 0.0


@dataclass(frozen=True)
class StepOutcome:
    """How a step ended: complete or not, why, and its iterations."""

    complete: bool
    reason: str
    iterations: tuple[IterationResult, ...] = ()
    spent_before: int = 0
    maximum: int = 1

    @property
    def iterations_used(self) -> int:
        return self.spent_before + sum(1 for it in self.iterations if it.counted)

    @property
    def last(self) -> IterationResult | None:
        return self.iterations[-1] if self.iterations else None

    def describe(self) -> str:
        """`did not complete after 10 iterations (max_iterations)`-style explanation."""
        used = self.iterations_used
        n = f"{used} iteration{'' if used == 1 else 's'}"
        return {
            "max_iterations": f"did not print the marker in {used}/{self.maximum} iterations",
            "no_progress": f"stopped after {n}: no commit and no file change in the last ones (no_progress)",
            "repeated_error": f"stopped after {n}: the same error repeated (repeated_error)",
            "max_cost": f"stopped after {n}: --max-cost reached",
            "timeout": "timed out",
            "interrupted": f"interrupted during iteration {self.last.number if self.last else used}",
        }.get(self.reason, f"did not complete after {n} ({self.reason})")
