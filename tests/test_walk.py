"""The walk of one sandboxed step in docs/development.md is the path a real step takes.

A real `fks run --sandbox` runs under a profiler that records, call by call, which package file
each function belongs to; the walk's Python files must all be entered, in the walk's order.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fks_testing.helpers import git, init_repo, write_config

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
WALK = re.compile(r"<!-- BEGIN WALK.*?-->(.*?)<!-- END WALK -->", re.S)

AGENT = """#!/bin/sh
echo "work" > work.txt
git add work.txt && git commit -qm "agent: work"
echo FORKHESTRA_COMPLETE
"""

# Runs fks with a profiler: every call of a function (not a module or class body run by an
# import) of a package file is appended to the trace (a file once per run of consecutive
# calls), and each call from another file is counted by callee and caller file: the caller is
# the nearest calling frame in the package (a call the standard library makes for it, such as
# contextlib's for a `with`, is the package frame's that made it; "" when none is). Both are
# written when fks exits.
TRACED = """
import atexit, collections, inspect, json, sys, threading
trace, calls = [], collections.Counter()
def caller(frame):
    frame = frame.f_back
    while frame is not None and "/sandbox_runner/" not in frame.f_code.co_filename:
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        name = frame.f_code.co_filename
        if "/sandbox_runner/" in name:
            if not trace or trace[-1] != name:
                trace.append(name)
            if (by := caller(frame)) != name:
                calls[name, by] += 1
sys.setprofile(profile)
threading.setprofile(profile)
out = sys.argv.pop(1)
def write():
    entered = [[name, by, n] for (name, by), n in calls.items()]
    open(out, "w").write(json.dumps({"trace": trace, "calls": entered}))
atexit.register(write)
sys.argv[0] = "fks"
from sandbox_runner.cli import main
main()
"""
LIFECYCLE = ROOT / "sandbox_runner" / "runs" / "lifecycle.py"


def _walk() -> list[str]:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    found = WALK.search(text)
    assert found, "docs/development.md has no walk section"
    return re.findall(r"^\d+\. `([^`]+)` — ", found.group(1), re.M)


def _in_order(walk: list[str], trace: list[str]) -> list[str]:
    """The walk's Python files the trace does not enter after the previous one (empty: all)."""
    position, missing = 0, []
    for path in walk:
        if not path.endswith(".py"):
            continue
        target = str(ROOT / path)
        hit = next((i for i in range(position, len(trace)) if trace[i] == target), None)
        if hit is None:
            missing.append(path)
        else:
            position = hit
    return missing


def test_the_walk_is_the_path_a_sandboxed_step_takes(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    agent = repo / "agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    write_config(repo, {})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "agent")
    out = tmp_path / "trace.json"
    done = subprocess.run(
        [sys.executable, "-c", TRACED, str(out), "run", "./agent.sh:2", "--sandbox"],
        cwd=repo,
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "work.txt").read_text() == "work\n"  # the step's commit landed
    traced = json.loads(out.read_text())
    trace = [str(Path(p).resolve()) for p in traced["trace"]]
    walk = _walk()
    assert len(walk) >= 10
    assert _in_order(walk, trace) == []
    assert _entries(LIFECYCLE, traced["calls"]) == 1  # the run's one owner is called once


def _entries(module: Path, calls: list[list[object]]) -> int:
    """How often `module` was entered from another file (calls within it do not count)."""
    return sum(
        int(str(n))
        for name, by, n in calls
        if Path(str(name)).resolve() == module and Path(str(by)).resolve() != module
    )


def test_only_calls_from_other_files_enter_a_module() -> None:
    other = str(ROOT / "sandbox_runner" / "commands" / "run.py")
    calls: list[list[object]] = [[str(LIFECYCLE), other, 1], [str(LIFECYCLE), str(LIFECYCLE), 5]]
    assert _entries(LIFECYCLE, calls) == 1
    assert _entries(LIFECYCLE, [*calls, [str(LIFECYCLE), "", 2]]) == 3


def test_a_walk_out_of_order_is_caught() -> None:
    files = [str(ROOT / p) for p in ("a.py", "b.py", "c.py")]
    assert _in_order(["a.py", "b.py", "c.py"], [files[0], files[1], files[2]]) == []
    assert _in_order(["a.py", "b.py", "c.py"], [files[0], files[2], files[1]]) == ["c.py"]
    assert _in_order(["a.py", "x.sh", "c.py"], [files[0], files[2]]) == []
