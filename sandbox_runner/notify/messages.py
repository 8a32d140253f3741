"""What a notification says: one `Notice` per event, built from the run record or the forge
task it is about. It says what happened, what it cost and how to look (`fks show RUN`, the
`fks ui` page when one serves the project); text an agent could have written (task titles,
questions, review issues, a failed run's error) is neutralised and bounded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import IterationEnd, Status, StepEnd, WorkStatus
from sandbox_runner.plan.notify import Level, NotifyEvent
from sandbox_runner.records.record import RunRecord

TITLE_LIMIT = 120
"""Characters of a title at most."""
TEXT_LIMIT = 600
"""Characters of one piece of agent-written text in a body at most."""
# Words chat services turn into pings of everyone (Slack's <!channel>, Discord's @everyone).
_PINGS = re.compile(r"@(?=(?:channel|here|everyone|all)\b)|<(?=[!@#])", re.IGNORECASE)


@dataclass(frozen=True)
class Notice:
    """One notification, before it is sent."""

    event: NotifyEvent
    """The event it is recorded as: the most specific of `events`."""
    events: frozenset[str]
    """Every event it counts as (a budget stop is a `run_end` too): a target that takes any
    of them gets it."""
    level: Level
    title: str
    body: str


def inert(text: str, limit: int = TEXT_LIMIT) -> str:
    """Agent-written `text` as a notification carries it: no escape sequences or control
    characters, no line breaks, no mass pings, at most `limit` characters."""
    # Cut first (escape sequences only shorten it): 1 MB of text costs no more than a line.
    text = text[: limit * 4]
    flat = " / ".join(p.strip() for p in strip_escapes(text).splitlines() if p.strip())
    flat = _PINGS.sub(lambda m: m[0] + "\u200b", flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def title(text: str) -> str:
    return inert(text, TITLE_LIMIT)


def _ending(record: RunRecord) -> tuple[NotifyEvent, Level, str]:
    """(event, level, words) of how the run ended."""
    reason, status = record.reason, record.status
    if status == Status.COMPLETE:
        return NotifyEvent.RUN_END, Level.INFO, status.value
    if status == Status.INTERRUPTED:
        return NotifyEvent.RUN_END, Level.WARNING, status.value
    if reason in (StepEnd.MAX_COST, IterationEnd.BUDGET):
        return NotifyEvent.BUDGET, Level.WARNING, "stopped on its budget"
    if reason == IterationEnd.AUTH_ERROR:
        return NotifyEvent.AUTH_ERROR, Level.FAILURE, "stopped: the API refused the credentials"
    return NotifyEvent.FAILED, Level.FAILURE, status.value  # failed, or incomplete


def _why(record: RunRecord) -> list[str]:
    """The run's end reason and its fix, as lines (none for a complete run)."""
    reason = record.reason
    if record.status == Status.COMPLETE or reason is None:
        return []
    text, fix = getattr(reason, "text", None), getattr(reason, "fix", None)
    lines = [f"Why: {text}" if isinstance(text, str) else f"Why: {inert(str(reason))}"]
    if isinstance(fix, str):
        lines.append(f"Fix: {fix.replace('RUN', record.id)}")
    return lines


def run_ended(record: RunRecord, project: Path, page: str | None) -> Notice:
    """A run's end: complete, stopped on its budget or on credentials, failed, interrupted."""
    event, level, words = _ending(record)
    events = frozenset({NotifyEvent.RUN_END, event})
    steps = f"{record.steps_done}/{len(record.steps)} steps"
    lines = [
        f"Run {record.id} ({inert(record.label, 200)}) {words}: {steps}, cost "
        f"{usd(record.cost_usd)}.",
        *_why(record),
        f"Look: fks show {record.id}  (in {inert(str(project), 300)})",
    ]
    if page is not None:
        lines.append(f"Open: {page}")
    return Notice(event, events, level, title(f"fks: {record.label} {words}"), "\n".join(lines))


_TASK_ENDS = {
    WorkStatus.COMPLETED: (NotifyEvent.RUN_END, Level.INFO, "landed"),
    WorkStatus.FAILED: (NotifyEvent.FAILED, Level.FAILURE, WorkStatus.FAILED.value),
    WorkStatus.PENDING: (NotifyEvent.BUDGET, Level.WARNING, "stopped on the budget"),
}
"""How a forge task's rest is told (a task that waits for an answer is a `question`)."""


def task_ended(
    task_id: str, task_title: str, status: WorkStatus, why: str, cost: str, project: Path
) -> Notice | None:
    """A forge task came to rest: landed, failed (`why`), or stopped by the budget; None
    for a rest that is not told (interrupted, waiting)."""
    if status not in _TASK_ENDS:
        return None
    event, level, words = _TASK_ENDS[status]
    lines = [f"Task {inert(task_id, 80)} ({inert(task_title, 200)}) {words}, {cost}."]
    if why:
        lines.append(f"Why: {inert(why)}")
    lines.append(f"Look: fks forge show {inert(task_id, 80)}  (in {inert(str(project), 300)})")
    events = frozenset({NotifyEvent.RUN_END, event})
    return Notice(event, events, level, title(f"fks: {task_id} {words}"), "\n".join(lines))


def question(task_id: str, text: str, project: Path, page: str | None) -> Notice:
    """A forge task waits for an answer to `text`."""
    lines = [
        f"Task {inert(task_id, 80)} needs an answer before it goes on:",
        inert(text),
        f'Answer: fks forge answer {inert(task_id, 80)} "..."  (in {inert(str(project), 300)})',
    ]
    if page is not None:
        lines.append(f"Or on the board: {page}")
    return Notice(
        NotifyEvent.QUESTION,
        frozenset({NotifyEvent.QUESTION}),
        Level.WARNING,
        title(f"fks: {task_id} has a question"),
        "\n".join(lines),
    )


def review(
    task_id: str, task_title: str, approved: bool, issues: list[str], cost_usd: float
) -> Notice:
    """A forge review's verdict on a task's implementation."""
    verdict = "approved" if approved else "rejected"
    lines = [f"Task {inert(task_id, 80)} ({inert(task_title, 200)}): review {verdict}."]
    lines += [f"- {inert(issue, 300)}" for issue in issues[:5]]
    if len(issues) > 5:
        lines.append(f"(and {len(issues) - 5} more)")
    lines.append(f"Cost so far {usd(cost_usd)}; fks forge status {inert(task_id, 80)}")
    return Notice(
        NotifyEvent.REVIEW,
        frozenset({NotifyEvent.REVIEW}),
        Level.INFO if approved else Level.WARNING,
        title(f"fks: {task_id} review {verdict}"),
        "\n".join(lines),
    )


def pull_request(url: str, pr_title: str, *, run_id: str | None, updated: bool) -> Notice:
    """A pull request fks opened or updated."""
    verb = "updated" if updated else "opened"
    lines = [f"Pull request {verb}: {inert(pr_title, 200)}", inert(url, 500)]
    if run_id is not None:
        lines.append(f"Look: fks show {run_id}")
    return Notice(
        NotifyEvent.PR,
        frozenset({NotifyEvent.PR}),
        Level.INFO,
        title(f"fks: pull request {verb}"),
        "\n".join(lines),
    )
