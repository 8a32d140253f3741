"""`fks run --junit FILE` (sandbox_runner/records/junit.py) and the CI example that publishes it."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from fks_testing.helpers import FKS, commit_scripts, fks, init_repo, write_config

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "ci" / "github-actions.yml"

OK_AGENT = """#!/bin/sh
n=$(ls ok-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "ok $n" > ok-$n.txt
git add ok-$n.txt && git commit -qm "ok $n"
echo FORKHESTRA_COMPLETE
"""

FAIL_AGENT = """#!/bin/sh
# Never completes; stderr carries colour codes (control characters XML cannot hold).
n=$(ls fail-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "fail $n" > fail-$n.txt
printf '\\033[31mboom %s\\033[0m <&> \\n' "$n" >&2
exit 3
"""

SLEEP_AGENT = """#!/bin/sh
echo "started"
sleep 30
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = commit_scripts(
        init_repo(tmp_path / "proj"),
        {"ok.sh": OK_AGENT, "fail.sh": FAIL_AGENT, "sleep.sh": SLEEP_AGENT},
    )
    monkeypatch.chdir(path)
    return path


def cases(suite: ET.Element) -> list[ET.Element]:
    return suite.findall("testcase")


def test_complete_run(project: Path) -> None:
    report = project / "reports" / "nested" / "fks.xml"  # directories are created
    done = fks("run", "./scripts/ok.sh:2 -> ./scripts/ok.sh", "--junit", str(report), cwd=project)
    assert done.code == 0, done.output
    suite = ET.parse(report).getroot()
    assert suite.tag == "testsuite"
    assert suite.get("name") == "fks: ./scripts/ok.sh:2 -> ./scripts/ok.sh"
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("2", "0", "0", "0")
    assert float(suite.get("time", "x")) > 0
    run_id = next((project / ".forge" / "runs").iterdir()).name
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["run_id"] == run_id
    assert props["status"] == "complete"
    first, second = cases(suite)
    assert first.get("classname") == "fks../scripts/ok.sh:2 -> ./scripts/ok.sh"
    assert (first.get("name"), second.get("name")) == ("1 ./scripts/ok.sh", "2 ./scripts/ok.sh")
    for case in (first, second):
        assert float(case.get("time", "x")) > 0
        assert [child.tag for child in case] == ["system-out"]
    out = first.findtext("system-out") or ""
    assert re.match(
        r"iteration 1, exit 0, marker yes, reason marker, \d+\.\ds, changed, log (\S+)\n$", out
    )
    log = out.split("log ")[-1].strip()
    assert log == f".forge/runs/{run_id}/01-ok.sh/001.log"
    assert (project / log).is_file()


def test_incomplete_run(project: Path) -> None:
    done = fks(
        "run",
        "./scripts/ok.sh -> ./scripts/fail.sh:2 -> ./scripts/ok.sh",
        "--junit",
        "fks.xml",
        cwd=project,
    )
    assert done.code == 1, done.output
    suite = ET.parse(project / "fks.xml").getroot()  # parses although stderr had ESC characters
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("3", "1", "0", "1")
    passed, failed, skipped = cases(suite)
    assert passed.find("failure") is None and passed.find("skipped") is None
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("message") == "max_iterations"
    details = failure.text or ""
    assert "did not complete: max_iterations" in details
    assert "iterations used: 2/2" in details
    assert "last exit code: 3" in details
    assert "boom 2 <&>" in details  # escaped on the way in, intact on the way out
    assert "\x1b" not in (project / "fks.xml").read_text()
    out = (failed.findtext("system-out") or "").splitlines()
    assert [line.split(",")[0] for line in out] == ["iteration 1", "iteration 2"]
    assert all("exit 3, marker no, reason exit_3" in line for line in out)
    skip = skipped.find("skipped")
    assert skip is not None
    assert skip.get("message") == "not started: step 2 did not complete"
    assert skipped.find("system-out") is None


def test_named_chain(project: Path) -> None:
    write_config(
        project, {"chains": {"pair": {"steps": [{"agent": "./scripts/ok.sh", "iterations": 2}]}}}
    )
    done = fks("run", "--chain", "pair", "--junit", "fks.xml", cwd=project)
    assert done.code == 0, done.output
    suite = ET.parse(project / "fks.xml").getroot()
    assert suite.get("name") == "fks: pair"
    assert cases(suite)[0].get("classname") == "fks.pair"


def test_interrupted_step_is_an_error(project: Path, tmp_path: Path) -> None:
    from sandbox_runner.records.junit import write_junit
    from sandbox_runner.records.store import RunStore

    proc = subprocess.Popen(
        [FKS, "run", "./scripts/sleep.sh:2 -> ./scripts/ok.sh"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        runs = project / ".forge" / "runs"
        deadline = time.monotonic() + 240
        while not any(p.stat().st_size for p in runs.glob("*/01-*/*.log")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    store = RunStore(project)
    record = store.load(store.resolve("last"))
    assert record.status == "interrupted"
    report = tmp_path / "interrupted.xml"
    write_junit(report, record)
    suite = ET.parse(report).getroot()
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("2", "0", "1", "1")
    interrupted, after = cases(suite)
    error = interrupted.find("error")
    assert error is not None
    assert error.get("message") == "interrupted"
    assert "iterations used: 0/2" in (error.text or "")  # the interrupted one is not counted
    assert after.find("skipped") is not None


# --- examples/ci: the workflow that publishes the report ---------------------------------------


def workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def test_ci_workflow_parses_and_has_the_steps() -> None:
    data = workflow()
    assert True in data or "on" in data  # YAML 1.1 reads a bare `on` key as True
    (job,) = data["jobs"].values()
    steps = job["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "pip install ." in runs
    assert "fks image build" in runs
    assert re.search(r"fks run .*--sandbox.*--junit \S+.*--json", runs)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert ".forge/runs" in upload["with"]["path"]
    assert upload["with"]["include-hidden-files"] is True
    publish = next(s for s in steps if "junit" in s.get("uses", ""))
    assert publish["if"] == "always()"
    junit_file = re.search(r"--junit (\S+)", runs)
    assert junit_file is not None and junit_file.group(1) in publish["with"]["report_paths"]


def fks_command_lines(data: dict[str, Any]) -> list[list[str]]:
    lines: list[list[str]] = []
    for job in data["jobs"].values():
        for step in job["steps"]:
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0] == "fks":
                    lines.append(words)
    return lines


def help_options(subcommand: list[str]) -> set[str]:
    done = subprocess.run(
        [FKS, *subcommand, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", done.stdout))


def test_ci_workflow_uses_only_real_fks_options() -> None:
    lines = fks_command_lines(workflow())
    assert {tuple(words[:2]) for words in lines} >= {("fks", "run"), ("fks", "image")}
    checked = 0
    for words in lines:
        sub = words[1:3] if words[1] == "image" else words[1:2]
        known = help_options(sub)
        args = words[1 + len(sub) :]
        if "--" in args:
            args = args[: args.index("--")]  # passed to the agents
        used = [a.split("=", 1)[0] for a in args if a.startswith("-") and a != ">"]
        unknown = [a for a in used if a not in known]
        assert not unknown, f"{shlex.join(words)}: {unknown} not in `fks {' '.join(sub)} --help`"
        checked += len(used)
    assert checked >= 4  # --chain, --sandbox, --max-cost, --junit, --json at least


def test_json_output_parses_next_to_junit(project: Path) -> None:
    """The workflow redirects --json to a file while --junit writes the report."""
    done = fks("run", "./scripts/ok.sh", "--junit", "fks.xml", "--json", cwd=project)
    assert done.code == 0, done.output
    assert json.loads(done.stdout)
    assert ET.parse(project / "fks.xml").getroot().get("tests") == "1"
