"""`fks run --junit FILE`: the run as a JUnit XML test suite, one test case per step, for CI."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.units import usd
from sandbox_runner.outcomes import Status
from sandbox_runner.paths import write_atomic
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.record import IterationRecord, RunRecord, StepRecord
from sandbox_runner.records.timing import Pause, running_seconds

# Terminal escape sequences (colours) are noise in a report; the other characters XML 1.0
# cannot carry at all would make the whole file unreadable.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def write_junit(path: Path, record: RunRecord) -> None:
    """Write the report for `record` to `path` atomically (parent directories are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, junit_xml(record))


def junit_xml(record: RunRecord) -> str:
    suite = ET.Element("testsuite")
    cases = [_testcase(record, step) for step in record.steps]
    counts = {
        kind: sum(1 for case in cases if case.find(kind) is not None)
        for kind in ("failure", "error", "skipped")
    }
    _set(
        suite,
        name=f"fks: {record.label}",
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=_seconds(record.started, record.ended, record.pauses),
        timestamp=record.started.isoformat(timespec="seconds"),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_id", record.id),
        ("status", record.status),
        ("reason", record.reason),
        ("sandbox", "true" if record.options.sandbox else "false"),
        ("base_branch", record.base_branch),
        ("base_commit", record.base_commit),
        ("cost_usd", f"{record.cost_usd:.4f}" if record.cost_usd else None),
    ):
        if value is not None:
            _set(ET.SubElement(properties, "property"), name=name, value=value)
    suite.extend(cases)
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )


def _testcase(record: RunRecord, step: StepRecord) -> ET.Element:
    case = ET.Element("testcase")
    _set(
        case,
        classname=f"fks.{record.label}",
        name=f"{step.index} {step.agent}",
        time=_seconds(step.started, step.ended, record.pauses),
    )
    status = step.status
    if status == Status.PENDING:
        blocker = (
            f"step {record.failed_at} did not complete"
            if record.failed_at
            else f"the run is {record.status}"
        )
        _set(ET.SubElement(case, "skipped"), message=f"not started: {blocker}")
    elif status == Status.INTERRUPTED or (
        status == Status.RUNNING and record.status != Status.RUNNING
    ):
        error = ET.SubElement(case, "error")
        _set(error, message=step.reason or Status.INTERRUPTED, type=Status.INTERRUPTED)
        error.text = _clean(_details(record, step))
    elif status != Status.COMPLETE:
        failure = ET.SubElement(case, "failure")
        reason = step.reason or status
        _set(failure, message=reason, type=status)
        failure.text = _clean(_details(record, step))
    if step.iterations:
        out = ET.SubElement(case, "system-out")
        logs = ForgeLayout(Path()).run_dir(record.id).as_posix()  # relative to the project
        out.text = _clean("\n".join(_iteration_line(it, logs) for it in step.iterations) + "\n")
    return case


def _details(record: RunRecord, step: StepRecord) -> str:
    lines = [
        f"step {step.index} ({step.agent}) did not complete: {step.reason or step.status}",
        f"iterations used: {step.iterations_used}/{step.iterations_max}",
    ]
    exits = [it.exit_code for it in step.iterations if it.exit_code is not None]
    if exits:
        lines.append(f"last exit code: {exits[-1]}")
    if step.branch:
        landed = "merged" if step.merged else "not merged"
        lines.append(f"branch: {step.branch} ({landed})")
    if step.conflicts:
        lines.append(f"conflicts: {', '.join(step.conflicts)}")
    tails = [it.error_tail for it in step.iterations if it.error_tail]
    if tails:
        lines.append("last stderr:")
        lines.extend(f"  {line}" for line in tails[-1].splitlines()[-5:])
    lines.append(f"inspect: fks show {record.id}; fks logs {record.id} {step.index}")
    if step.branch and not step.merged:
        lines.append(f"review: fks review {record.id}")
    return "\n".join(lines) + "\n"


def _iteration_line(it: IterationRecord, logs: str) -> str:
    parts = [
        f"iteration {it.number}",
        f"exit {'-' if it.exit_code is None else it.exit_code}",
        f"marker {'yes' if it.marker else 'no'}",
    ]
    if it.reason:
        parts.append(f"reason {it.reason}")
    if it.ended is not None:
        parts.append(f"{(it.ended - it.started).total_seconds():.1f}s")
    if it.changed is not None:
        parts.append("changed" if it.changed else "unchanged")
    if it.claude is not None and it.claude.cost_usd is not None:
        parts.append(usd(it.claude.cost_usd))
    if not it.counted:
        parts.append("not counted")
    if it.log:
        parts.append(f"log {logs}/{it.log}")
    return ", ".join(parts)


def _seconds(start: datetime | None, end: datetime | None, pauses: Sequence[Pause]) -> str:
    """Seconds from `start` to `end`, the run's pauses between sessions left out."""
    if start is None or end is None:
        return "0"
    return f"{running_seconds(pauses, start, end):.3f}"


def _clean(text: str) -> str:
    return NOT_XML.sub("", strip_escapes(text))


def _set(element: ET.Element, **attributes: str) -> None:
    for key, value in attributes.items():
        element.set(key, _clean(value))
