"""`fks runs`: the recorded runs as a table or JSON, filtered by age and status, with totals;
the runs of one `fks forge run` grouped under it, each titled with its task."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sandbox_runner.commands.runs import (
    format_cost,
    local_time,
    open_store,
    print_table,
    run_status,
    span,
)
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.output import plural
from sandbox_runner.console.units import usd
from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.forge.work import WorkStore
from sandbox_runner.outcomes import Status
from sandbox_runner.plan.checks import did_you_mean
from sandbox_runner.records.landed import landed as run_landed
from sandbox_runner.records.record import RunRecord, now
from sandbox_runner.records.store import RunStore

STATUSES = (*(s.value for s in Status if s != Status.PENDING), "died")
"""What `fks runs --status` takes: a run's status, or `died` (running, but its process is gone)."""
_AGE = re.compile(r"(\d{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_TITLE_WIDTH = 60


@dataclass(frozen=True)
class RunFilter:
    """Which runs `fks runs` shows."""

    since: datetime | None = None
    statuses: frozenset[str] = frozenset()
    limit: int | None = None
    """The newest N of those that match."""


@dataclass
class Group:
    """One line of the listing: a run, or a forge session with its task runs under it."""

    session: str | None
    runs: list[RunRecord] = field(default_factory=list)


def parse_since(text: str) -> datetime:
    """`30m`, `12h`, `7d`, `2w` (ago), or a date or date and time (local unless it says)."""
    age = _AGE.fullmatch(text.strip())
    if age:
        return now() - timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--since {text!r}: give an age (30m, 12h, 7d, 2w), a date (2026-11-25) "
            "or a date and time (2026-11-25T14:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


def parse_statuses(values: Iterable[str]) -> frozenset[str]:
    """`--status complete,failed --status died` → the set, each checked."""
    wanted = {v.strip() for value in values for v in value.split(",") if v.strip()}
    for status in sorted(wanted - set(STATUSES)):
        raise UsageError(
            f"--status {status!r}: not a run status{did_you_mean(status, STATUSES)}; "
            f"choose from {', '.join(STATUSES)}"
        )
    return frozenset(wanted)


def list_runs(
    *, cwd: Path | None, selection: RunFilter = RunFilter(), json_output: bool = False
) -> int:
    """One row per run (forge sessions grouped), oldest first, then the totals."""
    store = open_store(cwd)
    records = _selected(_load(store), selection)
    forge = forge_info(store.project)
    groups = _grouped(records, forge.sessions)
    if json_output:
        print(json.dumps(_json(groups, forge, records), indent=2))
        return EXIT_COMPLETE
    if not records:
        if _filtered(selection):
            print(f"No run recorded in {store.root} matches {_filters_given(selection)}.")
        else:
            print(f"No runs recorded in {store.root}.")
        return EXIT_COMPLETE
    print_table([row for group in groups for row in _rows(group, forge)])
    print(_totals_line(records, forge))
    return EXIT_COMPLETE


def _filters_given(selection: RunFilter) -> str:
    """`--status failed and --since` as the user gave them (without the values)."""
    given = [
        option
        for option, value in (
            ("--since", selection.since),
            (f"--status {','.join(sorted(selection.statuses))}", selection.statuses),
        )
        if value
    ]
    return " and ".join(given) or "--limit"


def _filtered(selection: RunFilter) -> bool:
    return bool(selection.since or selection.statuses or selection.limit is not None)


def _load(store: RunStore) -> list[RunRecord]:
    records: list[RunRecord] = []
    for run_id in store.ids():
        try:
            records.append(store.load(run_id))
        except FksError:
            print(f"fks: skipped run {run_id}: its run.json cannot be read", file=sys.stderr)
    return sorted(records, key=lambda r: (r.started, r.id))


def _selected(records: list[RunRecord], selection: RunFilter) -> list[RunRecord]:
    out = [
        r
        for r in records
        if (selection.since is None or r.started >= selection.since)
        and (not selection.statuses or run_status(r) in selection.statuses)
    ]
    if selection.limit is not None:
        out = out[-selection.limit :] if selection.limit else []
    return out


@dataclass(frozen=True)
class ForgeInfo:
    """What the forge work items say about the runs of `fks forge run`."""

    sessions: dict[str, str] = field(default_factory=dict)
    """Run id → the session that made it (for records made before runs named their session)."""
    titles: dict[str, str] = field(default_factory=dict)
    """Task id → its title, as plain one-line text."""
    landed: frozenset[str] = frozenset()
    """The last run of every task whose work landed on its base (`records.landed`)."""


def forge_info(project: Path) -> ForgeInfo:
    try:
        items = WorkStore(project).items()
    except FksError:
        return ForgeInfo()
    return ForgeInfo(
        sessions={run: i.session for i in items if i.session for run in i.runs},
        titles={i.task_id: _plain(i.title) for i in items if i.title},
        landed=frozenset(i.runs[-1] for i in items if i.landed and i.runs),
    )


def landed(record: RunRecord, forge: ForgeInfo) -> bool:
    """All of the run's work is on its base branch (what that means: `records.landed`)."""
    return run_landed(record, forge.landed)


def failed(record: RunRecord) -> bool:
    return run_status(record) in (Status.FAILED, "died")


def _plain(text: str) -> str:
    """Text safe to show: no escape sequences, no control or bidi-control characters."""
    text = strip_escapes(text, keep="")
    return "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp"))


def _grouped(records: Sequence[RunRecord], sessions: dict[str, str]) -> list[Group]:
    """Runs in order; a forge session's runs together where its first one started."""
    groups: list[Group] = []
    by_session: dict[str, Group] = {}
    for record in records:
        session = record.options.forge_session or sessions.get(record.id)
        if record.options.forge_task and session:
            if session not in by_session:
                by_session[session] = Group(session)
                groups.append(by_session[session])
            by_session[session].runs.append(record)
        else:
            groups.append(Group(None, [record]))
    return groups


def _label(record: RunRecord, forge: ForgeInfo) -> str:
    task = record.options.forge_task
    if task is None:
        return _plain(record.label)
    title = forge.titles.get(task)
    return f"forge {_plain(task)} {title}" if title else f"forge {_plain(task)}"


def _run_row(record: RunRecord, forge: ForgeInfo, indent: str = "") -> tuple[str, ...]:
    state = run_status(record)
    if state == Status.RUNNING:
        duration = span(record.started, now(), record.pauses)  # so far
    elif state == "died":
        duration = "-"
    else:
        duration = span(record.started, record.ended, record.pauses)
    pr = f" (PR #{record.pr.number})" if record.pr and record.pr.number else ""
    return (
        indent + record.id,
        _label(record, forge) + pr,
        local_time(record.started),
        duration,
        state,
        f"{record.steps_done}/{len(record.steps)}",
        format_cost(record),
    )


def _rows(group: Group, forge: ForgeInfo) -> list[tuple[str, ...]]:
    if group.session is None:
        return [_run_row(group.runs[0], forge)]
    runs = group.runs
    tasks = {r.options.forge_task for r in runs}
    ends = [r.ended for r in runs]
    running = any(run_status(r) == Status.RUNNING for r in runs)
    head = (
        group.session,
        f"forge session: {plural(len(tasks), 'task')}",
        local_time(runs[0].started),
        span(runs[0].started, now() if running else max((e for e in ends if e), default=None)),
        f"{len(_landed_tasks(runs, forge))}/{len(tasks)} landed",
        "",
        usd(sum(r.cost_usd for r in runs)),
    )
    return [head, *(_run_row(r, forge, indent="  ") for r in runs)]


def _landed_tasks(runs: Sequence[RunRecord], forge: ForgeInfo) -> set[str | None]:
    """The forge tasks of `runs` whose work landed."""
    return {r.options.forge_task for r in runs if landed(r, forge)}


def _totals(records: Sequence[RunRecord], forge: ForgeInfo) -> dict[str, Any]:
    return {
        "runs": len(records),
        "landed": sum(landed(r, forge) for r in records),
        "failed": sum(failed(r) for r in records),
        "cost_usd": round(sum(r.cost_usd for r in records), 6),
    }


def _totals_line(records: Sequence[RunRecord], forge: ForgeInfo) -> str:
    t = _totals(records, forge)
    return (
        f"\nTotal: {plural(t['runs'], 'run')}, {t['landed']} landed, {t['failed']} failed, "
        f"{usd(t['cost_usd'])}"
    )


def _run_json(record: RunRecord, forge: ForgeInfo) -> dict[str, Any]:
    task = record.options.forge_task
    return {
        "id": record.id,
        "label": record.label,
        "forge_task": task,
        "title": forge.titles.get(task) if task else None,
        "started": record.started.isoformat(),
        "ended": record.ended.isoformat() if record.ended else None,
        "status": run_status(record),
        "steps": len(record.steps),
        "steps_done": record.steps_done,
        "landed": landed(record, forge),
        "cost_usd": round(record.cost_usd, 6),
        "pr": record.pr.model_dump(mode="json") if record.pr else None,
    }


def _json(
    groups: Sequence[Group], forge: ForgeInfo, records: Sequence[RunRecord]
) -> dict[str, Any]:
    runs = [{**_run_json(r, forge), "forge_session": g.session} for g in groups for r in g.runs]
    sessions = [
        {
            "id": g.session,
            "tasks": sorted({r.options.forge_task or "" for r in g.runs}),
            "runs": [r.id for r in g.runs],
            "landed": len(_landed_tasks(g.runs, forge)),
            "cost_usd": round(sum(r.cost_usd for r in g.runs), 6),
        }
        for g in groups
        if g.session
    ]
    return {"runs": runs, "forge_sessions": sessions, "totals": _totals(records, forge)}
