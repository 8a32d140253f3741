"""`fks runs`, `fks show RUN` and `fks logs RUN`: read the run records under `.forge/runs/`."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.records.store import (
    IterationRecord,
    RunRecord,
    RunStore,
    StepRecord,
    now,
    project_root,
    run_alive,
)

FOLLOW_INTERVAL = 0.2
"""Seconds between polls of run.json and the log files under `fks logs --follow`."""


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
    if record.status == "running" and not run_alive(record):
        return "died"
    return record.status


def step_status(step: StepRecord, run_state: str) -> str:
    if step.status == "running" and run_state == "died":
        return "died"
    if step.status == "pending":
        return "pending" if run_state == "running" else "not started"
    return step.status


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def span(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    return format_duration(max(0.0, (end - start).total_seconds()))


def local_time(moment: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return "-" if moment is None else moment.astimezone().strftime(fmt)


def has_cost(record: RunRecord) -> bool:
    return any(
        it.claude is not None and it.claude.cost_usd is not None
        for s in record.steps
        for it in s.iterations
    )


def format_cost(record: RunRecord) -> str:
    return f"${record.cost_usd:.4f}" if has_cost(record) else "-"


def yes_no(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def shown_path(path: Path) -> str:
    """`path` relative to the current directory when it is below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# --- fks runs ----------------------------------------------------------------------------------

_COLUMNS = ("ID", "CHAIN", "STARTED", "DURATION", "STATUS", "STEPS", "COST")
_CHAIN_WIDTH = 48
_CHAIN_MIN = 12
_STATUS_STYLE = {
    "complete": "green",
    "incomplete": "yellow",
    "failed": "red",
    "died": "red",
    "interrupted": "magenta",
    "running": "cyan",
}


def list_runs(*, cwd: Path | None) -> int:
    """One row per recorded run, oldest first."""
    store = open_store(cwd)
    records: list[RunRecord] = []
    unreadable: list[str] = []
    for run_id in store.ids():
        try:
            records.append(store.load(run_id))
        except FksError:
            unreadable.append(run_id)
    for run_id in unreadable:
        print(f"fks: skipped run {run_id}: its run.json cannot be read", file=sys.stderr)
    if not records:
        print(f"No runs recorded in {store.root}.")
        return EXIT_COMPLETE
    records.sort(key=lambda r: (r.started, r.id))
    rows = [_row(r) for r in records]
    if not (sys.stdout.isatty() and _print_rich_table(rows)):
        _print_plain_table(rows)
    return EXIT_COMPLETE


def _row(record: RunRecord) -> tuple[str, ...]:
    state = run_status(record)
    if state == "running":
        duration = "running"
    elif state == "died":
        duration = "-"
    else:
        duration = span(record.started, record.ended)
    return (
        record.id,
        record.label,
        local_time(record.started),
        duration,
        state,
        f"{record.steps_done}/{len(record.steps)}",
        format_cost(record),
    )


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


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
        print(line)
    return EXIT_COMPLETE


def _field(label: str, value: str) -> str:
    return f"  {label + ':':<11} {value}"


def describe_run(record: RunRecord, run_dir: Path) -> Iterator[str]:
    state = run_status(record)
    yield f"Run {record.id}"
    kind = "forge" if record.options.forge_task else "chain" if record.options.chain else "dsl"
    yield _field(kind, record.label)
    status = state
    if record.reason:
        status += f" ({record.reason})"
    if record.failed_at is not None:
        status += f", stopped at step {record.failed_at}"
    if state == "died":
        status += (
            f"; its process {record.pid} is gone (continue with: fks run --resume {record.id})"
        )
    elif state == "running":
        status += f" (pid {record.pid})"
    yield _field("status", status)
    where = (
        "sandbox (Docker, one branch per step)"
        if record.options.sandbox
        else "in a worktree of the task's branch (no sandbox)"
        if record.options.forge_task
        else "in place (no sandbox)"
    )
    if record.options.sandbox and record.options.image:
        where += f", image {record.options.image}"
    yield _field("ran", f"{where} in {record.cwd}")
    if record.base_branch or record.base_commit:
        commit = f" at {record.base_commit[:12]}" if record.base_commit else ""
        yield _field("base", f"{record.base_branch or '?'}{commit}")
    yield _field("started", local_time(record.started))
    if record.ended is not None:
        yield _field("ended", local_time(record.ended))
        yield _field("duration", span(record.started, record.ended))
    elif state == "running":
        yield _field("duration", f"{span(record.started, now())} so far")
    cost = format_cost(record)
    if record.options.max_cost is not None:
        cost += f" (limit ${record.options.max_cost:g})"
    yield _field("cost", cost)
    yield _field("record", shown_path(run_dir / "run.json"))
    for step in record.steps:
        yield ""
        yield from describe_step(step, state, run_dir)


def describe_step(step: StepRecord, run_state: str, run_dir: Path) -> Iterator[str]:
    status = step_status(step, run_state)
    if step.reason and step.reason != status:
        status += f" ({step.reason})"
    yield f"Step {step.index}: {step.agent}  {status}"
    limit = f"{step.iterations_used}/{step.iterations_max}" + ("" if step.loop else " (runs once)")
    timing = ""
    if step.started is not None:
        timing = f", started {local_time(step.started, '%H:%M:%S')}"
        if step.ended is not None:
            timing += f", took {span(step.started, step.ended)}"
    yield _field("iterations", f"{limit}{timing}")
    if step.branch:
        if step.merged:
            landed = f"merged into {step.base_branch or '?'}"
            if step.merge_commit:
                landed += f" at {step.merge_commit[:12]}"
        else:
            landed = "not merged"
        yield _field("branch", f"{step.branch} ({landed})")
        if step.start_commit:
            head = f" -> {step.head_commit[:12]}" if step.head_commit else ""
            yield _field("commits", f"{step.start_commit[:12]}{head}")
    if step.conflicts:
        yield _field("conflicts", ", ".join(step.conflicts))
    if step.worktree:
        yield _field("worktree", step.worktree)
    if step.workspace:
        yield _field("workspace", step.workspace)
    for it in step.iterations:
        yield from describe_iteration(it, run_state, run_dir)


def describe_iteration(it: IterationRecord, run_state: str, run_dir: Path) -> Iterator[str]:
    if it.ended is not None:
        took = span(it.started, it.ended)
    elif it.reason is None:
        took = "running" if run_state == "running" else "died"
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
    yield "  ".join(parts)
    if it.claude is not None:
        c = it.claude
        stats: list[str] = []
        if c.cost_usd is not None:
            stats.append(f"${c.cost_usd:.4f}")
        if c.input_tokens is not None or c.output_tokens is not None:
            stats.append(f"{c.input_tokens or 0} in / {c.output_tokens or 0} out tokens")
        if c.turns is not None:
            stats.append(f"{c.turns} turns")
        if c.subtype:
            stats.append(c.subtype)
        if c.session_id:
            stats.append(f"session {c.session_id}")
        if stats:
            yield f"      claude: {', '.join(stats)}"
    for denied in it.denied:
        yield f"      denied: {denied.describe()} (not on the sandbox's allow-list)"
    if it.denied_more:
        many = "s" if it.denied_more != 1 else ""
        yield f"      denied: {it.denied_more} more request{many} to other destinations"
    if it.error_tail and it.reason != "marker":
        tail = [line for line in it.error_tail.splitlines() if line.strip()][-3:]
        for line in tail:
            yield f"      stderr: {line}"
    if it.log:
        yield f"      log: {shown_path(run_dir / it.log)}"
    if it.log_dropped:
        yield f"      log cut: {it.log_dropped} bytes of output past the log limit were not kept"


# --- fks logs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Selection:
    step: int | None
    iteration: int | None

    def pick(self, record: RunRecord) -> list[tuple[StepRecord, IterationRecord]]:
        picked: list[tuple[StepRecord, IterationRecord]] = []
        for step in record.steps:
            if self.step is not None and step.index != self.step:
                continue
            picked.extend(
                (step, it)
                for it in step.iterations
                if it.log and (self.iteration is None or it.number == self.iteration)
            )
        return picked


def logs(
    *,
    run_ref: str,
    step: int | None,
    iteration: int | None,
    follow: bool,
    cwd: Path | None,
) -> int:
    """Print raw iteration logs; with `follow`, keep printing until the run stops."""
    store = open_store(cwd)
    record = load_run(store, run_ref)
    if iteration is not None and step is None:
        if len(record.steps) != 1:
            raise UsageError(
                f"--iteration needs a STEP: e.g. fks logs {record.id} 1 --iteration {iteration}"
            )
        step = record.steps[0].index
    if step is not None and not 1 <= step <= len(record.steps):
        raise UsageError(
            f"run {record.id} has {_count(len(record.steps), 'step')}; STEP must be 1-{len(record.steps)}"
        )
    selection = _Selection(step, iteration)
    following = follow and run_alive(record)
    if iteration is not None and not selection.pick(record) and not following:
        chosen = record.steps[step - 1] if step is not None else record.steps[0]
        numbers = sorted({it.number for it in chosen.iterations})
        ran = f"ran iterations 1-{numbers[-1]}" if numbers else "ran no iterations"
        raise UsageError(
            f"step {chosen.index} ({chosen.agent}) of run {record.id} {ran}; there is no iteration {iteration}"
        )
    sys.stdout.flush()
    printer = _LogPrinter(
        sys.stdout.buffer,
        headers=iteration is None and (following or len(selection.pick(record)) > 1),
    )
    run_dir = store.run_dir(record.id)
    if not following:
        for step_record, it in selection.pick(record):
            printer.copy(step_record, it, run_dir / it.log)
        if not printer.printed_any:
            _nothing_yet(record, step)
        return EXIT_COMPLETE
    while True:
        running = run_alive(record)
        for step_record, it in selection.pick(record):
            printer.copy(step_record, it, run_dir / it.log)
        if not running:
            if not printer.printed_any:
                _nothing_yet(record, step)
            return EXIT_COMPLETE
        time.sleep(FOLLOW_INTERVAL)
        try:
            record = store.load(record.id)
        except FksError:
            continue  # removed or replaced under us; try again on the next poll


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _nothing_yet(record: RunRecord, step: int | None) -> None:
    if step is not None:
        chosen = record.steps[step - 1]
        state = step_status(chosen, run_status(record))
        print(
            f"fks: no output recorded for step {chosen.index} ({chosen.agent}) of run {record.id} ({state})",
            file=sys.stderr,
        )
    else:
        print(
            f"fks: no output recorded for run {record.id} ({run_status(record)})", file=sys.stderr
        )


class _LogPrinter:
    """Copies log files to stdout as raw bytes, remembering how far each one was printed."""

    def __init__(self, out: BinaryIO, *, headers: bool) -> None:
        self._out = out
        self._headers = headers
        self._offsets: dict[Path, int] = {}
        self._at_line_start = True
        self.printed_any = False

    def copy(self, step: StepRecord, it: IterationRecord, path: Path) -> None:
        if path not in self._offsets:
            self._offsets[path] = 0
            self._header(step, it)
        try:
            with path.open("rb") as log:
                log.seek(self._offsets[path])
                while chunk := log.read(65536):
                    self._write(chunk)
                    self._offsets[path] += len(chunk)
        except FileNotFoundError:
            return

    def _header(self, step: StepRecord, it: IterationRecord) -> None:
        if not self._headers:
            return
        note = " (not counted)" if not it.counted and it.ended is not None else ""
        text = f"==> step {step.index} ({step.agent}) iteration {it.number}{note} <=="
        lead = b"" if not self.printed_any else (b"\n" if self._at_line_start else b"\n\n")
        self._write(lead + text.encode("utf-8", "replace") + b"\n")

    def _write(self, data: bytes) -> None:
        if not data:
            return
        self._out.write(data)
        self._out.flush()
        self._at_line_start = data.endswith(b"\n")
        self.printed_any = True
