"""Why an iteration ended, as a reason the run record keeps and a line for the user that names
the cause and the fix (the turn limit, the key, the URL, the budget, a stall)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_runner.agentclis.events import answer_in
from sandbox_runner.backends.api import ExecResult
from sandbox_runner.outcomes import ALIKE, UNCOUNTED, Exit, IterationEnd, Reason, parse_reason
from sandbox_runner.results.reported import ClaudeStats
from sandbox_runner.steps.guards import Budget, Stop

if TYPE_CHECKING:
    from sandbox_runner.agentclis.api import AgentCli
    from sandbox_runner.agentclis.events import Result

_AUTH_STATUSES = frozenset({401, 403})
_AUTH_WORDS = (
    "invalid api key",
    "authentication",
    "oauth token",
    "not logged in",
    "/login",
    "missing environment variable",
)
_UNREACHABLE_WORDS = (
    "unable to connect",
    "connection",
    "econnrefused",
    "enotfound",
    "fetch failed",
)


@dataclass(frozen=True)
class Ending:
    """How an iteration ended: its reason, the line for the user (None: nothing to say), and
    whether the agent failed."""

    reason: IterationEnd | Exit
    note: str | None = None
    failed: bool = False

    @property
    def counted(self) -> bool:
        """Whether it counts against the step's iterations."""
        return self.reason not in UNCOUNTED


@dataclass(frozen=True)
class Seen:
    """What is known when an iteration has ended."""

    number: int
    status: ExecResult
    result: Result | None
    marker: bool
    stream_json: bool
    cli: AgentCli | None = None
    """The agent CLI that ran (None: a plain program, or Claude in older callers)."""
    timeout: float | None = None
    stopped: Stop | None = None
    budget: Budget | None = None
    running_cost: float = 0.0
    stall_after: float | None = None
    metered: float | None = None
    """What the egress proxy's meter counted (None: no meter saw the iteration's calls)."""

    @property
    def cost(self) -> float:
        if self.metered is not None:
            return self.metered
        if self.result is not None and self.result.cost_usd is not None:
            return self.result.cost_usd
        return self.running_cost


def ending(seen: Seen) -> Ending:
    """The iteration's ending; the first cause that applies wins."""
    if seen.marker:
        return Ending(IterationEnd.MARKER)
    for judge in (_killed, _claude_error):
        found = judge(seen)
        if found is not None:
            return found
    status, n = seen.status, seen.number
    if seen.stream_json and seen.result is None and status.exit_code != 0:
        name = seen.cli.name if seen.cli is not None else "claude"
        note = f"Iteration {n}: {name} exited {status.exit_code} without a result"
        return Ending(Exit(status.exit_code), note, failed=True)
    if status.exit_code != 0:
        return Ending(Exit(status.exit_code), failed=True)
    return Ending(IterationEnd.NO_MARKER)


def _killed(seen: Seen) -> Ending | None:
    """Ended from outside: the budget, a stall, the memory limit, the timeout."""
    n, status, result = seen.number, seen.status, seen.result
    if seen.stopped is IterationEnd.BUDGET or (
        result is not None and result.subtype == "error_max_budget_usd"
    ):
        if seen.budget is not None:
            note = seen.budget.stopped(seen.budget.spent + seen.cost)
        else:
            note = f"Iteration {n} reached the agent's own --max-budget-usd"
        return Ending(IterationEnd.BUDGET, note, failed=True)
    if seen.stopped is IterationEnd.MAX_TURNS:
        turns = IterationEnd.MAX_TURNS
        note = f"Iteration {n} {turns.text}, counted by fks in its stream: {_fix(turns)}"
        return Ending(turns, note, failed=True)
    if seen.stopped is IterationEnd.STALLED:
        quiet = _duration(seen.stall_after or 0)
        note = (
            f"Iteration {n} stalled: no output for {quiet}, so fks stopped it; {_fix(seen.stopped)}"
        )
        return Ending(IterationEnd.STALLED, note, failed=True)
    if status.oom_limit is not None:
        oom = IterationEnd.OOM
        note = f"Iteration {n} was killed: out of memory (limit {status.oom_limit}); {_fix(oom)}"
        return Ending(oom, note, failed=True)
    if status.timed_out:
        timeout = IterationEnd.TIMEOUT
        note = f"Iteration {n} {timeout.text} after {seen.timeout or 0:g}s and was killed"
        return Ending(timeout, note, failed=True)
    return None


def _claude_error(seen: Seen) -> Ending | None:
    """What the Claude CLI's result says went wrong."""
    n, result = seen.number, seen.result
    if result is None:
        return None
    text = " ".join((result.text or result.subtype).split())[:200]
    if result.rate_limited:
        limited = IterationEnd.RATE_LIMITED
        return Ending(limited, limited.text[:1].upper() + limited.text[1:])
    if result.subtype == "error_max_turns":
        turns = IterationEnd.MAX_TURNS
        note = f"Iteration {n} {turns.text} (error_max_turns): {_fix(turns)}"
        return Ending(turns, note, failed=True)
    if not result.is_error:
        return None
    lowered = text.lower()
    if result.api_error_status in _AUTH_STATUSES or any(w in lowered for w in _AUTH_WORDS):
        auth = IterationEnd.AUTH_ERROR
        fix = _fix(auth)
        base = "ANTHROPIC_BASE_URL"
        if seen.cli is not None and seen.cli.name != "claude":
            fix, base = f"check {' or '.join(seen.cli.key_vars)}", seen.cli.base_url_var
        note = f"Iteration {n}: {auth.text} ({text}); {fix} (and {base} for a gateway)"
        return Ending(auth, note, failed=True)
    if result.api_error_status is None and any(w in lowered for w in _UNREACHABLE_WORDS):
        unreachable = IterationEnd.API_UNREACHABLE
        note = (
            f"Iteration {n} could not reach the API ({text}); {_fix(unreachable)} "
            "(with --sandbox: the sandbox's network and allow-list)"
        )
        return Ending(unreachable, note, failed=True)
    return Ending(IterationEnd.IS_ERROR, f"Iteration {n} ended with an error: {text}", failed=True)


def alike(
    reasons: Sequence[Reason | str],
    *,
    max_turns: int | None = None,
    timeout: float | None = None,
    stall_after: float | None = None,
) -> str | None:
    """What ended every counted iteration of a step that did not complete, when that is one
    cause other than a missing marker, with its fix (None: the iterations ended otherwise)."""
    if not reasons or len(set(reasons)) != 1:
        return None
    reason = parse_reason(reasons[0])
    each = "every one" if len(reasons) > 1 else "it"
    if isinstance(reason, Exit):
        times = " every time" if len(reasons) > 1 else ""
        return f"{reason.text}{times} ({reason}): {reason.fix}" if reason.code else None
    if reason not in ALIKE:
        return None
    assert isinstance(reason, IterationEnd)
    what = reason.text
    if reason is IterationEnd.MAX_TURNS:
        what = f"stopped at maxTurns ({max_turns})" if max_turns else "stopped at the turn limit"
    elif reason is IterationEnd.TIMEOUT and timeout:
        what += f" after {timeout:g}s"
    elif reason is IterationEnd.STALLED and stall_after:
        what += f" for {_duration(stall_after)}"
    return f"{each} {what} ({reason}): {_fix(reason)}"


def _fix(reason: IterationEnd) -> str:
    """The fix of an end that has one."""
    assert reason.fix is not None
    return reason.fix


def _duration(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g}s"


def claude_stats(result: Result, *, answer: bool = False) -> ClaudeStats:
    """What the CLI reported; `answer`: the step asked for a structured answer, which a CLI
    without a way to give one wrote as a JSON block of its last text."""
    structured = result.structured_output
    if answer and structured is None and not result.is_error:
        structured = answer_in(result.text)
    return ClaudeStats(
        cost_usd=result.cost_usd,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        turns=result.num_turns,
        subtype=result.subtype,
        session_id=result.session_id,
        duration_ms=result.duration_ms,
        structured_output=structured,
    )


def with_metered(seen: Seen, stats: ClaudeStats | None) -> ClaudeStats | None:
    """The CLI's figures (None: it reported none, and its stream's cost, a lower bound, if it
    showed one), with the meter's cost where a meter saw the calls: the same for every agent
    (the CLI's own is an estimate)."""
    if stats is None and seen.running_cost > 0:
        stats = ClaudeStats(cost_usd=seen.running_cost)
    if seen.metered is None:
        return stats
    return (stats or ClaudeStats()).model_copy(update={"cost_usd": seen.metered})
