"""`fks forge run --junit FILE`: one test case per task (landed, failed, or waiting)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from sandbox_runner.console.output import plural
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
