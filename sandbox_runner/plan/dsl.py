"""The chain DSL: `"planner:3 -> builder"` → a list of `Step`s.

`agent` runs once and needs no marker; `agent:N` loops up to N times until the marker.
Agent names may contain `:` (`fk:builder:3` is agent `fk:builder`, 3 iterations) and may be
paths. A trailing `:suffix` that starts with a digit must be a positive integer in ASCII digits
(and one after a defined agent's name is a count, `plan.checks.check_dsl_agents`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from sandbox_runner.errors import UsageError
from sandbox_runner.paths import shorten

ARROW = "->"
# Far beyond any real chain; they keep a typo (`builder:1000000`) from running for weeks and
# bound the work of parsing and recording a run.
MAX_ITERATIONS = 10_000
MAX_STEPS = 1_000
_ASCII_DIGITS = frozenset("0123456789")


@dataclass(frozen=True)
class Step:
    """One step of a chain: which agent, how many iterations, and what to pass it."""

    agent: str
    iterations: int = 1
    loop: bool = False
    args: tuple[str, ...] = ()
    prompt: str | None = None
    prompt_file: str | None = None


def agent_name_problem(name: str) -> str | None:
    """Why `name` cannot be an agent name (None if it can): control characters would reach
    terminals and records verbatim and can hide what actually runs."""
    for char in name:
        if unicodedata.category(char) == "Cc":
            return f"contains the control character {char!r}"
    return None


def iterations_problem(count: int) -> str | None:
    """Why `count` cannot be a step's iteration count (None if it can)."""
    if count < 1:
        return "must be a positive integer"
    if count > MAX_ITERATIONS:
        return f"must be at most {MAX_ITERATIONS:,}"
    return None


def _count_suffix(item: str) -> tuple[str, str] | None:
    """`(agent, count)` when `item` ends in `:count` (a suffix starting with a digit, no path)."""
    agent, sep, count = item.rpartition(":")
    if not sep or "/" in count or "\\" in count:
        return None
    first = count.removeprefix("-")[:1]
    if not first or not first.isdigit():  # any script's digit: `a:٣` is a bad count, not a name
        return None
    return agent, count


def parse_step(text: str) -> Step:
    """Parse one `agent[:N]` item."""
    item = text.strip()
    if not item:
        raise UsageError("empty step in DSL: every '->' needs an agent on both sides")
    problem = agent_name_problem(item)
    if problem:
        raise UsageError(f"step {shorten(repr(item))}: the agent name {problem}; use a plain name")
    suffix = _count_suffix(item)
    if suffix is None:
        return Step(agent=item)
    agent, count = suffix
    if not agent:
        raise UsageError(f"step '{item}' has an iteration count but no agent name")
    if not set(count) <= _ASCII_DIGITS:
        bad: str | None = "must be a positive integer"
    else:
        # int() of thousands of digits is slow (and refused); such a count is too big anyway.
        digits = count.lstrip("0") or "0"
        value = int(digits) if len(digits) <= len(str(MAX_ITERATIONS)) else MAX_ITERATIONS + 1
        bad = iterations_problem(value)
    if bad:
        shown = shorten(item)
        raise UsageError(
            f"step '{shown}': iterations {bad} (e.g. '{shorten(agent)}:3'), got '{shorten(count)}'"
        )
    return Step(agent=agent, iterations=int(count), loop=True)


def parse_dsl(dsl: str) -> list[Step]:
    """Parse `a[:N] (-> b[:N])*` into steps; raises UsageError naming the bad part."""
    if not dsl.strip():
        raise UsageError("empty DSL: give at least one agent, e.g. 'fks run builder:10'")
    # Counted before anything is parsed: a huge DSL is refused in linear time.
    steps = dsl.count(ARROW) + 1
    if steps > MAX_STEPS:
        raise UsageError(f"the DSL has {steps:,} steps; at most {MAX_STEPS:,} are allowed")
    return [parse_step(part) for part in dsl.split(ARROW)]
