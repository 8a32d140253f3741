"""How iterations and steps ended: the value objects the loop produces, backends adjust
(`PreparedStep.after_iteration`, `PreparedStep.land`) and the reporters show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sandbox_runner.outcomes import FINISHED, IterationEnd, Reason, StepEnd
from sandbox_runner.results.reported import ClaudeStats, DeniedRecord, NetworkRecord


@dataclass(frozen=True)
class IterationResult:
    """How one iteration ended."""

    number: int
    complete: bool
    marker: bool
    reason: Reason
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
    network: NetworkRecord | None = None
    """Every request made through the egress proxy (None: the iteration had none)."""

    @property
    def rate_limited(self) -> bool:
        return self.reason == IterationEnd.RATE_LIMITED

    @property
    def cost_usd(self) -> float:
        return (self.claude.cost_usd or 0.0) if self.claude else 0.0


def usd_limit(value: float) -> str:
    """A budget as the user wrote it: `$0.05`, `$0.00001`, `$2` (never `$1e-05`)."""
    text = f"{value:.8f}".rstrip("0").rstrip(".")
    return "$" + (text if text not in ("", "0") else f"{value:.2g}")


@dataclass(frozen=True)
class StepOutcome:
    """How a step ended: complete or not, why, and its iterations."""

    complete: bool
    reason: Reason
    iterations: tuple[IterationResult, ...] = ()
    spent_before: int = 0
    maximum: int = 1
    detail: str | None = None
    """What a budget stop adds to its reason (`Stopped: spent $0.0612 of --max-cost $0.05`)."""
    cause: str | None = None
    """What ended every one of its iterations, when they all ended alike for another reason
    than a missing marker, with the fix (`every one stopped at maxTurns (10) …`)."""

    @property
    def iterations_used(self) -> int:
        return self.spent_before + sum(1 for it in self.iterations if it.counted)

    @property
    def last(self) -> IterationResult | None:
        return self.iterations[-1] if self.iterations else None

    def describe(self) -> str:
        """`did not complete after 10 iterations (max_iterations)`-style explanation; the cause
        of every iteration's end when they all ended alike."""
        used = self.iterations_used
        if self.cause and self.reason == StepEnd.MAX_ITERATIONS:
            return f"stopped after {used}/{self.maximum} iterations: {self.cause}"
        why = self._why(used)
        return f"{why}; {self.cause}" if self.cause else why

    def _why(self, used: int) -> str:
        n, reason = f"{used} iteration{'' if used == 1 else 's'}", self.reason
        if reason in (StepEnd.NO_PROGRESS, StepEnd.REPEATED_ERROR):
            return f"stopped after {n}: {reason.text} ({reason})"
        if reason in (IterationEnd.AUTH_ERROR, IterationEnd.API_UNREACHABLE):
            return f"stopped after {n}: {reason.text} ({reason}); {reason.fix}"
        why: dict[Reason, str] = {
            StepEnd.MAX_ITERATIONS: f"did not print the marker in {used}/{self.maximum} iterations",
            StepEnd.MAX_COST: f"stopped after {n}: "
            + (self.detail or "--max-cost reached").removeprefix("Stopped: "),
            IterationEnd.STALLED: "stalled: no output for too long (stalled); see stallTimeout",
            IterationEnd.TIMEOUT: IterationEnd.TIMEOUT.text,
            IterationEnd.INTERRUPTED: "interrupted during iteration "
            f"{self.last.number if self.last else used}",
        }
        return why.get(reason, f"did not complete after {n} ({reason})")

    def agent_failed(self) -> str | None:
        """For a step without :N that moved on: how its agent failed (None: it did not)."""
        last = self.last
        if last is None or last.reason in FINISHED:
            return None
        return f"exit {last.exit_code}, {last.reason}"

    def end_line(self, agent: str, loop: bool) -> str:
        """The step's last line: `Done: x (exit 0)`, `Complete after 2 iterations`, …"""
        used = self.iterations_used
        if self.complete and self.reason == StepEnd.LANDED_ON_RESUME:
            return f"Landed on resume: {agent} (only its merge was left; no agent ran)"
        if self.complete and not loop:
            failed = self.agent_failed()
            if failed is not None:
                return (
                    f"Agent failed: {agent} ({failed}); moving on, as a step without :N "
                    "does whatever its exit code"
                )
            return f"Done: {agent} (exit {self.last.exit_code if self.last else None})"
        if self.complete:
            return f"Complete after {used} iteration{'' if used == 1 else 's'}"
        return f"Incomplete: {agent} {self.describe()}"
