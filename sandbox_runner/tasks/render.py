"""What `list` and `view` print: stable plain text for people and agents, or JSON.

Task files may have been written by an agent: the plain text carries none of their escape
sequences or control characters, and their bidi controls are shown as `<U+202E>`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.tasks import model
from sandbox_runner.tasks.store import TaskFile

_STATUS_WIDTH = max(len(status) for status in model.STATUSES)
_PRIORITY_WIDTH = max(len(priority) for priority in model.PRIORITIES)


def list_line(tf: TaskFile) -> str:
    """`TASK-k3f9x2  To Do        high    Title  (labels: a, b; depends on: TASK-x; AC 1/3)`."""
    meta = tf.task.meta
    line = f"{meta.id}  {meta.status:<{_STATUS_WIDTH}}  {meta.priority:<{_PRIORITY_WIDTH}}  {meta.title}"
    extras = []
    if meta.labels:
        extras.append(f"labels: {', '.join(meta.labels)}")
    if meta.dependencies:
        extras.append(f"depends on: {', '.join(meta.dependencies)}")
    criteria = tf.task.acceptance_criteria
    if criteria:
        extras.append(f"AC {sum(c.checked for c in criteria)}/{len(criteria)}")
    return strip_escapes(f"{line}  ({'; '.join(extras)})" if extras else line, keep="")


def view_text(tf: TaskFile, *, file: str, ready: bool, dependency_status: dict[str, str]) -> str:
    """The whole task as plain text; `dependency_status` maps each dependency id to its status."""
    task, meta = tf.task, tf.task.meta
    dependencies = ", ".join(
        f"{dep} ({dependency_status.get(dep, 'missing')})" for dep in meta.dependencies
    )
    criteria = "\n".join(
        model.criterion_line(number, criterion)
        for number, criterion in enumerate(task.acceptance_criteria, 1)
    )
    lines = [
        f"{meta.id} - {meta.title}",
        f"Status: {meta.status}{' (ready)' if ready else ''}",
        f"Priority: {meta.priority}",
        f"Labels: {', '.join(meta.labels) or 'none'}",
        f"Dependencies: {dependencies or 'none'}",
        f"Created: {_timestamp(meta.created)}",
        f"Updated: {_timestamp(meta.updated)}",
        f"File: {file}",
    ]
    blocks = [
        ("Description", task.description),
        ("Acceptance Criteria", criteria),
        ("Notes", task.notes),
        *((section.heading, section.text) for section in task.other_sections),
    ]
    for heading, text in blocks:
        lines += ["", f"{heading}:", text or "(none)"]
    return strip_escapes("\n".join(lines), keep="\t\n")


def task_json(tf: TaskFile, *, file: str, ready: bool) -> dict[str, Any]:
    """One task as a JSON object (the same shape in `list --json` and `view --json`)."""
    task, meta = tf.task, tf.task.meta
    return {
        "id": meta.id,
        "title": meta.title,
        "status": meta.status,
        "priority": meta.priority,
        "labels": list(meta.labels),
        "dependencies": list(meta.dependencies),
        "ready": ready,
        "created": meta.created.isoformat(),
        "updated": meta.updated.isoformat(),
        "description": task.description,
        "acceptance_criteria": [
            {"index": number, "text": criterion.text, "checked": criterion.checked}
            for number, criterion in enumerate(task.acceptance_criteria, 1)
        ],
        "notes": task.notes,
        "other_sections": [{"heading": s.heading, "text": s.text} for s in task.other_sections],
        "file": file,
    }


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
