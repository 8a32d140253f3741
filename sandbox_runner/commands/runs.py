"""`fks runs` and `fks show RUN`: read the run records under `.forge/runs/`."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.lines import clip
from sandbox_runner.console.shown import one_line
from sandbox_runner.console.units import byte_count, usd
from sandbox_runner.errors import EXIT_COMPLETE, UsageError
from sandbox_runner.outcomes import IterationEnd, Status
from sandbox_runner.records.record import (
    IterationRecord,
    PullRecord,
    RunRecord,
    StepRecord,
    now,
    run_alive,
)
from sandbox_runner.records.store import RunStore, project_root
from sandbox_runner.records.timing import Pause, running_seconds
from sandbox_runner.results.ended import usd_limit
from sandbox_runner.results.reported import ClaudeStats

_STDERR_WIDTH = 300


# --- shared by the read-only commands ---------------------------------------------------------


def open_store(cwd: Path | None) -> RunStore:
    """The run store of the project `cwd` is in (the git top, else `cwd` itself)."""
    workdir = (cwd or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise UsageError(f"--cwd {cwd}: not a directory")
    return RunStore(project_root(workdir))


def load_run(store: RunStore, run_ref: str) -> RunRecord:
    return store.load(store.resolve(run_ref))


def run_status(record: RunRecord) -> str:
    """The recorded status, except that a `running` run whose process is gone has `died`."""
    if record.status == Status.RUNNING and not run_alive(record):
        return "died"
    return record.status


def step_status(step: StepRecord, run_state: str) -> str:
    if step.status == Status.RUNNING and run_state == "died":
        return "died"
    if step.status == Status.PENDING:
        return Status.PENDING if run_state == Status.RUNNING else "not started"
    return step.status


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def span(start: datetime | None, end: datetime | None, pauses: Sequence[Pause] = ()) -> str:
    """The time from `start` to `end` a run was running (`pauses`: its pauses between
    sessions, left out)."""
    if start is None or end is None:
        return "-"
    return format_duration(running_seconds(pauses, start, end))


def local_time(moment: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return "-" if moment is None else moment.astimezone().strftime(fmt)


def format_cost(record: RunRecord) -> str:
    return usd(record.cost_usd)


def yes_no(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def shown_path(path: Path) -> str:
    """`path` relative to the current directory when it is below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# --- the fks runs table (commands/listing.py chooses the rows) --------------------------------

_COLUMNS = ("ID", "CHAIN", "STARTED", "DURATION", "STATUS", "STEPS", "COST")
_CHAIN_WIDTH = 48
_CHAIN_MIN = 12
_STATUS_STYLE = {
    Status.COMPLETE: "green",
    Status.INCOMPLETE: "yellow",
    Status.FAILED: "red",
    "died": "red",
    Status.INTERRUPTED: "magenta",
    Status.RUNNING: "cyan",
}


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    """The `fks runs` columns: a rich table on a wide enough terminal, else plain text."""
    if not (sys.stdout.isatty() and _print_rich_table(rows)):
        _print_plain_table(rows)


def _print_plain_table(rows: Sequence[tuple[str, ...]]) -> None:
    clipped = [
        tuple(_clip(c, _CHAIN_WIDTH) if i == 1 else c for i, c in enumerate(row)) for row in rows
    ]
    table = [_COLUMNS, *clipped]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS))]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _print_rich_table(rows: Sequence[tuple[str, ...]]) -> bool:
    """A table for the terminal; False when the terminal is too narrow for it."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    widest = [max(len(name), *(len(row[i]) for row in rows)) for i, name in enumerate(_COLUMNS)]
    # Only the chain gives way on a narrow terminal: an id or a status cut short is useless.
    fixed = sum(w for name, w in zip(_COLUMNS, widest, strict=True) if name != "CHAIN")
    if fixed + 2 * (len(_COLUMNS) - 1) + _CHAIN_MIN > console.width:
        return False
    table = Table(box=None, header_style="bold", pad_edge=False)
    for i, name in enumerate(_COLUMNS):
        table.add_column(
            name,
            no_wrap=True,
            overflow="ellipsis",
            min_width=_CHAIN_MIN if name == "CHAIN" else widest[i],
            max_width=_CHAIN_WIDTH if name == "CHAIN" else None,
            justify="right" if name in ("STEPS", "COST", "DURATION") else "left",
        )
    for row in rows:
        cells = [Text(cell) for cell in row]
        cells[4].stylize(_STATUS_STYLE.get(row[4], ""))
        table.add_row(*cells)
    console.print(table)
    return True


# --- fks show ----------------------------------------------------------------------------------


def show(*, run_ref: str, cwd: Path | None) -> int:
    """The run header, then every step with its iterations."""
    store = open_store(cwd)
    record = load_run(store, run_ref)
    run_dir = store.run_dir(record.id)
    for line in describe_run(record, run_dir):
        # Branch and file names, hosts and stderr lines come from the agent.
        print(strip_escapes(line, keep=""))
    return EXIT_COMPLETE


def _field(label: str, value: str) -> str:
    return f"  {label + ':':<11} {value}"


def describe_run(record: RunRecord, run_dir: Path) -> Iterator[str]:
    state = run_status(record)
    yield f"Run {record.id}"
    kind = "forge" if record.options.forge_task else "chain" if record.options.chain else "dsl"
    yield _field(kind, record.label)
    yield _field("status", _run_status_line(record, state))
    yield _field("ran", f"{_run_place(record)} in {record.cwd}")
    if record.base_branch or record.base_commit:
        commit = f" at {record.base_commit[:12]}" if record.base_commit else ""
        yield _field("base", f"{record.base_branch or '?'}{commit}")
    yield from _run_times(record, state)
    cost = format_cost(record)
    if record.options.max_cost is not None:
        cost += f" (limit {usd_limit(record.options.max_cost)})"
    yield _field("cost", cost)
    if record.pr is not None:
        yield _field("pr", pull_line(record.pr))
    yield _field("record", shown_path(run_dir / "run.json"))
    if record.deliveries:
        yield _field("notified", _deliveries(record))
    for step in record.steps:
        yield ""
        yield from describe_step(step, state, run_dir, record.pauses)


def _deliveries(record: RunRecord) -> str:
    """The run's last notifications: `run_end to notify[0] (ntfy) sent, …`."""
    shown = [
        f"{d.event} to notify[{d.target}] ({d.service}) {'sent' if d.ok else 'not sent'}"
        for d in record.deliveries[-6:]
    ]
    more = len(record.deliveries) - len(shown)
    return ", ".join(shown) + (f" (and {more} before)" if more else "")


def pull_line(pull: PullRecord) -> str:
    """A run's pull request as `fks show` and `fks runs` name it."""
    if pull.error:
        return f"not opened: {one_line(pull.error, 300)} (fks pr RUN tries again)"
    if pull.note:
        return f"none: {pull.note}"
    return f"#{pull.number} ({pull.state}) {pull.url}"


def _run_status_line(record: RunRecord, state: str) -> str:
    status = state
    if record.reason and record.reason != state:
        status += f" ({record.reason})"
    if record.failed_at is not None:
        status += f", stopped at step {record.failed_at}"
    if state == "died":
        status += (
            f"; its process {record.pid} is gone (continue with: fks run --resume {record.id})"
        )
    elif state == Status.RUNNING:
        status += f" (pid {record.pid})"
    return status


def _run_place(record: RunRecord) -> str:
    where = (
        "sandbox (Docker, one branch per step)"
        if record.options.sandbox
        else "in a worktree of the task's branch (no sandbox)"
        if record.options.forge_task
        else "in place (no sandbox)"
    )
    if record.options.sandbox and record.options.image:
        where += f", image {record.options.image}"
    return where


def _run_times(record: RunRecord, state: str) -> Iterator[str]:
    yield _field("started", local_time(record.started))
    if record.ended is not None:
        yield _field("ended", local_time(record.ended))
        yield _field("duration", span(record.started, record.ended, record.pauses))
    elif state == Status.RUNNING:
        yield _field("duration", f"{span(record.started, now(), record.pauses)} so far")


def describe_step(
    step: StepRecord, run_state: str, run_dir: Path, pauses: Sequence[Pause] = ()
) -> Iterator[str]:
    status = step_status(step, run_state)
    if step.reason and step.reason != status:
        status += f" ({step.reason})"
    yield f"Step {step.index}: {step.agent}  {status}"
    limit = f"{step.iterations_used}/{step.iterations_max}" + ("" if step.loop else " (runs once)")
    yield _field("iterations", f"{limit}{_step_timing(step, pauses)}")
    if step.branch:
        yield from _step_branch(step, step.branch)
    if step.conflicts:
        yield _field("conflicts", ", ".join(step.conflicts))
    if step.worktree:
        yield _field("worktree", step.worktree)
    if step.workspace:
        yield _field("workspace", step.workspace)
    for it in step.iterations:
        yield from describe_iteration(it, run_state, run_dir)


def _step_timing(step: StepRecord, pauses: Sequence[Pause]) -> str:
    if step.started is None:
        return ""
    timing = f", started {local_time(step.started, '%H:%M:%S')}"
    if step.ended is not None:
        timing += f", took {span(step.started, step.ended, pauses)}"
    return timing


def _step_branch(step: StepRecord, branch: str) -> Iterator[str]:
    if step.merged:
        landed = f"merged into {step.base_branch or '?'}"
        if step.merge_commit:
            landed += f" at {step.merge_commit[:12]}"
    else:
        landed = "not merged"
    yield _field("branch", f"{branch} ({landed})")
    if step.start_commit:
        head = f" -> {step.head_commit[:12]}" if step.head_commit else ""
        yield _field("commits", f"{step.start_commit[:12]}{head}")


def describe_iteration(it: IterationRecord, run_state: str, run_dir: Path) -> Iterator[str]:
    yield _iteration_line(it, run_state)
    if it.claude is not None and (stats := _claude_stats(it.claude)):
        yield f"      agent CLI: {', '.join(stats)}"
    if it.note:
        yield f"      ended: {strip_escapes(' '.join(it.note.split()), keep='')}"
    yield from _iteration_denied(it)
    if it.network is not None and (total := it.network.total):
        many = "s" if total != 1 else ""
        yield f"      network: {total} request{many} through the egress proxy (fks show --network)"
    if it.error_tail and it.reason != IterationEnd.MARKER:
        tail = [line for line in it.error_tail.splitlines() if line.strip()][-3:]
        for line in tail:
            yield f"      stderr: {clip(line, _STDERR_WIDTH)}"
    if it.log:
        yield f"      log: {shown_path(run_dir / it.log)}"
    if it.log_dropped:
        dropped = byte_count(it.log_dropped)
        yield f"      log cut: {dropped} of output past the log limit were not kept"


def _iteration_line(it: IterationRecord, run_state: str) -> str:
    if it.ended is not None:
        took = span(it.started, it.ended)
    elif it.reason is None:
        took = Status.RUNNING if run_state == Status.RUNNING else "died"
    else:
        took = "-"
    exit_code = "-" if it.exit_code is None else str(it.exit_code)
    parts = [
        f"  #{it.number}",
        local_time(it.started, "%H:%M:%S"),
        took,
        f"exit {exit_code}",
        f"marker {yes_no(it.marker)}",
        f"changed {yes_no(it.changed)}",
    ]
    if it.reason:
        parts.append(f"reason {it.reason}")
    if it.container_id:
        parts.append(f"container {it.container_id[:12]}")
    if not it.counted and it.ended is not None:
        parts.append("(not counted)")
    return "  ".join(parts)


def _claude_stats(c: ClaudeStats) -> list[str]:
    stats: list[str] = []
    if c.cost_usd is not None:
        stats.append(usd(c.cost_usd))
    if c.input_tokens is not None or c.output_tokens is not None:
        stats.append(f"{c.input_tokens or 0} in / {c.output_tokens or 0} out tokens")
    if c.turns is not None:
        stats.append(f"{c.turns} turns")
    if c.subtype:
        stats.append(c.subtype)
    if c.session_id:
        stats.append(f"session {c.session_id}")
    return stats


def _iteration_denied(it: IterationRecord) -> Iterator[str]:
    for denied in it.denied:
        yield f"      denied: {denied.describe()} (not on the sandbox's allow-list)"
    if it.denied_more:
        many = "s" if it.denied_more != 1 else ""
        yield f"      denied: {it.denied_more} more request{many} to other destinations"
