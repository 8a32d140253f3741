"""The chain DSL: `"planner:3 -> builder"` → a list of `Step`s.

`agent` runs once and needs no marker; `agent:N` loops up to N times until the marker.
Agent names may contain `:` (`fk:builder:3` is agent `fk:builder`, 3 iterations) and may be
paths. A trailing `:suffix` that starts with a digit must be a positive integer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox_runner.errors import UsageError

ARROW = "->"
_DIGIT_SUFFIX = re.compile(r"^(?P<agent>.*):(?P<count>-?\d[^:/\\]*)$")


@dataclass(frozen=True)
class Step:
    """One step of a chain: which agent, how many iterations, and what to pass it."""

    agent: str
    iterations: int = 1
    loop: bool = False
    args: tuple[str, ...] = ()
    prompt: str | None = None
    prompt_file: str | None = None


def parse_step(text: str) -> Step:
    """Parse one `agent[:N]` item."""
    item = text.strip()
    if not item:
        raise UsageError("empty step in DSL: every '->' needs an agent on both sides")
    match = _DIGIT_SUFFIX.match(item)
    if match is None:
        return Step(agent=item)
    agent, count = match["agent"], match["count"]
    if not agent:
        raise UsageError(f"step '{item}' has an iteration count but no agent name")
    if not count.isdigit() or int(count) < 1:
        raise UsageError(
            f"step '{item}': iterations must be a positive integer (e.g. '{agent}:3'), got '{count}'"
        )
    return Step(agent=agent, iterations=int(count), loop=True)


def parse_dsl(dsl: str) -> list[Step]:
    """Parse `a[:N] (-> b[:N])*` into steps; raises UsageError naming the bad part."""
    if not dsl.strip():
        raise UsageError("empty DSL: give at least one agent, e.g. 'fks run builder:10'")
    return [parse_step(part) for part in dsl.split(ARROW)]
