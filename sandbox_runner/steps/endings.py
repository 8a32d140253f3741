"""Why an iteration ended, as a reason the run record keeps and a line for the user that names
the cause and the fix (the turn limit, the key, the URL, the budget, a stall)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecResult
from sandbox_runner.steps.guards import Budget, Stop

if TYPE_CHECKING:
    from sandbox_runner.steps.streamjson import Result

STOPS_THE_STEP = frozenset({"auth_error", "api_unreachable", "budget"})
"""Iteration ends that another iteration cannot fix: the step stops at once."""
ENDS_A_STEP_WITHOUT_N = frozenset({"timeout", "rate_limited", "oom", "stalled", "budget"})
"""Iteration ends after which even a step without :N is incomplete (fks or the machine ended
the agent, it did not finish)."""
_AUTH_STATUSES = frozenset({401, 403})
_AUTH_WORDS = ("invalid api key", "authentication", "oauth token", "not logged in", "/login")
_UNREACHABLE_WORDS = (
    "unable to connect",
    "connection",
    "econnrefused",
    "enotfound",
    "fetch failed",
)


@dataclass(frozen=True)
class Ending:
    """How an iteration ended: its reason, the line for the user (None: nothing to say),
    whether it counts against the step's iterations, and whether the agent failed."""

    reason: str
    note: str | None = None
    counted: bool = True
    failed: bool = False


@dataclass(frozen=True)
class Seen:
    """What is known when an iteration has ended."""

    number: int
    status: ExecResult
    result: Result | None
    marker: bool
    stream_json: bool
    timeout: float | None = None
    stopped: Stop | None = None
    budget: Budget | None = None
    running_cost: float = 0.0
    stall_after: float | None = None

    @property
    def cost(self) -> float:
        if self.result is not None and self.result.cost_usd is not None:
            return self.result.cost_usd
        return self.running_cost


def ending(seen: Seen) -> Ending:
    """The iteration's ending; the first cause that applies wins."""
    if seen.marker:
        return Ending("marker")
    for judge in (_killed, _claude_error):
        found = judge(seen)
        if found is not None:
            return found
    status, n = seen.status, seen.number
    if seen.stream_json and seen.result is None and status.exit_code != 0:
        note = f"Iteration {n}: claude exited {status.exit_code} without a result"
        return Ending(f"exit_{status.exit_code}", note, failed=True)
    if status.exit_code != 0:
        return Ending(f"exit_{status.exit_code}", failed=True)
    return Ending("no_marker")


def _killed(seen: Seen) -> Ending | None:
    """Ended from outside: the budget, a stall, the memory limit, the timeout."""
    n, status, result = seen.number, seen.status, seen.result
    if seen.stopped == "budget" or (
        result is not None and result.subtype == "error_max_budget_usd"
    ):
        if seen.budget is not None:
            note = seen.budget.stopped(seen.budget.spent + seen.cost)
        else:
            note = f"Iteration {n} reached the agent's own --max-budget-usd"
        return Ending("budget", note, failed=True)
    if seen.stopped == "stalled":
        quiet = _duration(seen.stall_after or 0)
        note = (
            f"Iteration {n} stalled: no output for {quiet}, so fks stopped it; if the agent "
            "really works that long in silence, raise stallTimeout in forge/chains.json (0: off)"
        )
        return Ending("stalled", note, failed=True)
    if status.oom_limit is not None:
        note = (
            f"Iteration {n} was killed: out of memory (limit {status.oom_limit}); "
            "raise sandbox.memory in forge/chains.json"
        )
        return Ending("oom", note, failed=True)
    if status.timed_out:
        note = f"Iteration {n} timed out after {seen.timeout or 0:g}s and was killed"
        return Ending("timeout", note, failed=True)
    return None


def _claude_error(seen: Seen) -> Ending | None:
    """What the Claude CLI's result says went wrong."""
    n, result = seen.number, seen.result
    if result is None:
        return None
    text = " ".join((result.text or result.subtype).split())[:200]
    if result.rate_limited:
        return Ending("rate_limited", "The API answered with a rate-limit/overload error", False)
    if result.subtype == "error_max_turns":
        note = (
            f"Iteration {n} hit the turn limit (error_max_turns): raise the agent's maxTurns "
            "in forge/chains.json, or give it a smaller task"
        )
        return Ending("max_turns", note, failed=True)
    if not result.is_error:
        return None
    lowered = text.lower()
    if result.api_error_status in _AUTH_STATUSES or any(w in lowered for w in _AUTH_WORDS):
        note = (
            f"Iteration {n}: the API refused the credentials ({text}); check "
            "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (and ANTHROPIC_BASE_URL for a gateway)"
        )
        return Ending("auth_error", note, failed=True)
    if result.api_error_status is None and any(w in lowered for w in _UNREACHABLE_WORDS):
        note = (
            f"Iteration {n} could not reach the API ({text}); check ANTHROPIC_BASE_URL and the "
            "network (with --sandbox: the sandbox's network and allow-list)"
        )
        return Ending("api_unreachable", note, failed=True)
    return Ending("is_error", f"Iteration {n} ended with an error: {text}", failed=True)


def alike(
    reasons: Sequence[str],
    *,
    max_turns: int | None = None,
    timeout: float | None = None,
    stall_after: float | None = None,
) -> str | None:
    """What ended every counted iteration of a step that did not complete, when that is one
    cause other than a missing marker, with its fix (None: the iterations ended otherwise)."""
    if not reasons or len(set(reasons)) != 1:
        return None
    reason, each = reasons[0], "every one" if len(reasons) > 1 else "it"
    if reason == "max_turns":
        limit = f"maxTurns ({max_turns})" if max_turns else "the turn limit"
        return (
            f"{each} stopped at {limit} (max_turns): raise the agent's maxTurns in "
            "forge/chains.json, or give it a smaller task"
        )
    if reason == "timeout":
        after = f" after {timeout:g}s" if timeout else ""
        return (
            f"{each} timed out{after} (timeout): raise sandbox.timeout in forge/chains.json, "
            "or give it a smaller task"
        )
    if reason == "oom":
        return f"{each} ran out of memory (oom): raise sandbox.memory in forge/chains.json"
    if reason == "stalled":
        quiet = f" for {_duration(stall_after)}" if stall_after else ""
        return (
            f"{each} stalled, printing nothing{quiet} (stalled): if the agent really works "
            "that long in silence, raise stallTimeout in forge/chains.json (0: off)"
        )
    if reason == "is_error":
        return f"{each} ended with an error from Claude (is_error): its notes are in fks show"
    if reason.startswith("exit_") and reason != "exit_0":
        times = " every time" if len(reasons) > 1 else ""
        return f"the agent exited {reason.removeprefix('exit_')}{times} ({reason}): its output is in fks logs"
    return None


def _duration(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g}s"
