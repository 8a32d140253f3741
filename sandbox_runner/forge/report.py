"""What `fks forge` reports of its tasks: a line each, each as JSON, and `--junit FILE` (one
test case per task: landed, failed, or waiting)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from sandbox_runner.console.output import plural
from sandbox_runner.console.shown import one_line
from sandbox_runner.console.units import usd
from sandbox_runner.forge.work import WorkItem
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.paths import write_atomic
from sandbox_runner.records.junit import NOT_XML


def write_junit(path: Path, items: Sequence[WorkItem]) -> None:
    suite = ET.Element("testsuite", name="fks forge", tests=str(len(items)))
    failures = skipped = 0
    for item in items:
        case = ET.SubElement(
            suite, "testcase", classname="fks.forge", name=_clean(f"{item.task_id} {item.title}")
        )
        ET.SubElement(case, "system-out").text = _clean(
            f"stage {item.stage}, {plural(item.attempts, 'attempt')}, "
            f"{item.retries} {'retry' if item.retries == 1 else 'retries'}, "
            f"{usd(item.cost_usd)}, branch {item.branch}, runs {' '.join(item.runs)}"
        )
        if item.status == WorkStatus.FAILED:
            failures += 1
            ET.SubElement(case, "failure", message=_clean(item.error or WorkStatus.FAILED))
        elif item.status != WorkStatus.COMPLETED:
            skipped += 1
            why = (
                item.question
                if item.status == WorkStatus.WAITING
                else f"{item.status} at {item.stage}"
            )
            ET.SubElement(case, "skipped", message=_clean(f"not finished: {why}"))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", "0")
    ET.indent(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n")


def _clean(text: str) -> str:
    return NOT_XML.sub("?", text)


def summary_line(item: WorkItem, session: str) -> str:
    """The line `fks forge run` ends with for each of its tasks."""
    what = {
        WorkStatus.COMPLETED: f"landed ({(item.merge_commit or '')[:12]})",
        WorkStatus.IN_PR: f"in pull request {item.pr.url if item.pr else '?'}",
        WorkStatus.FAILED: f"failed: {one_line(item.error or '')}",
        WorkStatus.WAITING: f"waiting for an answer: {one_line(item.question or '')}",
        WorkStatus.PENDING: f"stopped before {item.stage} (--max-cost)",
        WorkStatus.EXECUTING: f"being processed by another fks forge run (at {item.stage})",
        WorkStatus.INTERRUPTED: f"interrupted during {item.stage} (fks forge run --resume continues it)",
    }[item.shown_status]
    return (
        f"{item.task_id} {what}; {plural(item.attempts, 'attempt')}, {item.cost_text(session)}, "
        f"branch {item.branch}"
    )


def item_json(item: WorkItem) -> dict[str, object]:
    """A task as `--json` shows it (`fks forge run`, `status`, `show`)."""
    return {
        "task": item.task_id,
        "title": item.title,
        "status": item.shown_status,
        "stage": item.stage,
        "attempts": item.attempts,
        "retries": item.retries,
        "cost_usd": round(item.cost_usd, 6),
        "branch": item.branch,
        "merge_commit": item.merge_commit,
        "error": item.error,
        "question": item.question,
        "runs": item.runs,
        "pr": item.pr.model_dump(mode="json") if item.pr else None,
    }
