"""The timeline of a run as the geometry of an SVG chart: one lane per step, one bar per
iteration (its width its duration, its class its outcome) and a mark where a step merged (or
failed to). The
template draws it; every text here is data that autoescaping makes safe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sandbox_runner.commands.runs import format_duration
from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import CUT_SHORT, IterationEnd, Status
from sandbox_runner.records.record import IterationRecord, RunRecord, StepRecord, now

WIDTH = 1000.0
"""Width of the chart's drawing area in SVG units (the chart scales to the page)."""
NAME_WIDTH = 150.0
"""Width of the lane labels at the left."""
LANE = 26.0
"""Height of one lane."""
NAME_CHARS = 20
"""Characters of a lane's label (the step's number and agent) that fit in `NAME_WIDTH`."""
MIN_BAR = 0.6
"""The narrowest bar: an iteration of a second in a run of hours stays visible."""


UNCOUNTED = "uncounted"
"""The chart's word for an attempt that did not use up an iteration (a rate-limit answer)."""
LEGEND = (
    Status.COMPLETE,
    Status.INCOMPLETE,
    Status.FAILED,
    IterationEnd.TIMEOUT,
    IterationEnd.STALLED,
    IterationEnd.INTERRUPTED,
    UNCOUNTED,
    Status.RUNNING,
)
"""What the chart's colours mean, in the order its legend lists them."""


def outcome(it: IterationRecord) -> str:
    """One word for how an iteration ended, as the chart colours it: a status, or the reason
    when a limit or a stop ended it."""
    reason = it.reason
    if it.ended is None:
        return Status.RUNNING if not reason else IterationEnd.KILLED
    if not it.counted:
        return UNCOUNTED
    if it.marker:
        return Status.COMPLETE
    if reason in (IterationEnd.TIMEOUT, IterationEnd.STALLED):
        return reason
    if reason in CUT_SHORT:
        return IterationEnd.INTERRUPTED
    if reason == IterationEnd.ERROR or it.exit_code not in (None, 0):
        return Status.FAILED
    return Status.INCOMPLETE


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    y: float
    step: int
    number: int
    outcome: str
    title: str


@dataclass(frozen=True)
class Lane:
    y: float
    label: str
    merge_x: float | None
    merge_title: str
    merge_kind: str = "merge"
    """merge (the step landed on its base) or conflict (it could not)."""


@dataclass(frozen=True)
class Timeline:
    width: float
    height: float
    label_width: float
    lane_height: float
    lanes: list[Lane]
    bars: list[Bar]
    span: str
    """The time the chart covers, for its caption."""


def timeline(record: RunRecord) -> Timeline:
    """The chart of `record`: time runs from its start to its end (now while it runs)."""
    start = record.started
    end = _end(record)
    total = max((end - start).total_seconds(), 1e-3)
    scale = WIDTH / total
    lanes: list[Lane] = []
    bars: list[Bar] = []
    for n, step in enumerate(record.steps):
        y = n * LANE
        lanes.append(_lane(step, y, start, scale))
        bars += [_bar(step, it, y, start, scale, end) for it in step.iterations]
    return Timeline(
        width=NAME_WIDTH + WIDTH,
        height=max(len(lanes), 1) * LANE,
        label_width=NAME_WIDTH,
        lane_height=LANE,
        lanes=lanes,
        bars=bars,
        span=_seconds(total),
    )


def _end(record: RunRecord) -> datetime:
    ends = [it.ended or now() for s in record.steps for it in s.iterations]
    ends += [s.ended for s in record.steps if s.ended is not None]
    if record.ended is not None:
        ends.append(record.ended)
    return max(ends, default=now())


def _lane(step: StepRecord, y: float, start: datetime, scale: float) -> Lane:
    merge_x = None
    title = ""
    base = step.base_branch or "its base"
    if (step.merged or step.conflicts) and step.ended is not None:
        merge_x = NAME_WIDTH + (step.ended - start).total_seconds() * scale
    if step.merged:
        at = f" at {step.merge_commit[:12]}" if step.merge_commit else ""
        title = f"step {step.index} merged into {base}{at}"
    elif step.conflicts:
        title = f"step {step.index} could not merge into {base}: conflicts in "
        title += ", ".join(step.conflicts[:20])
    label = f"{step.index}: {step.agent}"
    label = label if len(label) <= NAME_CHARS else label[: NAME_CHARS - 1] + "…"
    kind = "merge" if step.merged else "conflict"
    return Lane(y=y, label=label, merge_x=merge_x, merge_title=title, merge_kind=kind)


def _bar(
    step: StepRecord, it: IterationRecord, y: float, start: datetime, scale: float, end: datetime
) -> Bar:
    began = (it.started - start).total_seconds()
    took = ((it.ended or end) - it.started).total_seconds()
    kind = outcome(it)
    return Bar(
        x=round(NAME_WIDTH + max(began, 0.0) * scale, 2),
        width=round(max(took * scale, MIN_BAR), 2),
        y=y + 4,
        step=step.index,
        number=it.number,
        outcome=kind,
        title=_title(step, it, kind, took),
    )


def _title(step: StepRecord, it: IterationRecord, kind: str, took: float) -> str:
    parts = [f"step {step.index} #{it.number}: {kind}", _seconds(took)]
    parts.append(f"exit {'-' if it.exit_code is None else it.exit_code}")
    if it.reason:
        parts.append(f"reason {it.reason}")
    if it.claude is not None and it.claude.cost_usd is not None:
        parts.append(usd(it.claude.cost_usd))
    if it.network is not None and it.network.total:
        parts.append(f"{it.network.total} requests through the egress proxy")
    denied = [d.describe() for d in it.denied]
    if it.denied_more:
        denied.append(f"{it.denied_more} more")
    if denied:
        parts.append("denied: " + "; ".join(denied))
    return ", ".join(parts)


def _seconds(value: float) -> str:
    return format_duration(max(value, 0.0))
