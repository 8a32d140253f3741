"""Run records made by real `fks run` invocations in a project of shell-script agents (one that
completes, one that fails, one that is slow), for the tests of `fks runs`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fks_testing.helpers import commit_scripts, fks, init_repo

OK_AGENT = """#!/bin/sh
# Commits one file, prints the marker.
n=$(ls ok-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "ok output $n"
echo "ok $n" > ok-$n.txt
git add ok-$n.txt && git commit -qm "ok $n"
echo FORKHESTRA_COMPLETE
"""

FAIL_AGENT = """#!/bin/sh
# Never completes: a line, a byte that is not UTF-8, a stderr line, exit 3.
n=$(ls fail-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "fail $n" > fail-$n.txt
echo "fail output $n"
printf 'raw \\377 byte\\n'
echo "boom $n" >&2
exit 3
"""

SLOW_AGENT = """#!/bin/sh
# Two lines ${SLOW:-1.5} s apart (or until the file $GATE exists) per iteration; the marker on
# iteration 2.
n=$(ls slow-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "slow $n" > slow-$n.txt
echo "$$" > "${PIDFILE:-/dev/null}"
echo "tick A $n"
if [ -n "$GATE" ]; then
  while [ ! -e "$GATE" ]; do sleep 0.05; done  # until the test opens the gate
else
  sleep "${SLOW:-1.5}"
fi
echo "tick B $n"
if [ "$n" -ge 2 ]; then echo FORKHESTRA_COMPLETE; fi
"""


@pytest.fixture(name="project")
def recorded_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project of the agents `scripts/ok.sh`, `scripts/fail.sh` and `scripts/slow.sh`, as the
    cwd: the fixture `project` of the modules that import it (in place of the usual one)."""
    path = commit_scripts(
        init_repo(tmp_path / "proj"),
        {"ok.sh": OK_AGENT, "fail.sh": FAIL_AGENT, "slow.sh": SLOW_AGENT},
    )
    monkeypatch.chdir(path)
    return path


def run_ids(project: Path) -> list[str]:
    return sorted(p.name for p in (project / ".forge" / "runs").iterdir())


def new_run(project: Path, *args: str, code: int) -> str:
    """Run `fks run ARGS`; returns the new run's id.

    Starts in a new second: run ids sort by their start second and then by a random suffix, so
    `last` is only certain to be the newest run across seconds.
    """
    time.sleep(1 - time.time() % 1 + 0.01)
    before = set(run_ids(project)) if (project / ".forge" / "runs").is_dir() else set()
    done = fks("run", *args, cwd=project)
    assert done.code == code, done.output
    (run_id,) = set(run_ids(project)) - before
    return run_id


def complete_run(project: Path) -> str:
    return new_run(project, "./scripts/ok.sh:3 -> ./scripts/ok.sh", code=0)


def incomplete_run(project: Path) -> str:
    return new_run(project, "./scripts/ok.sh:2 -> ./scripts/fail.sh:2 -> ./scripts/ok.sh", code=1)
