"""`fks run --resume` after Ctrl-C runs the interrupted iteration again; a run with no
iteration left says how to allow more instead of running nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from fks_testing.helpers import FKS, fks


def _wait_for(path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _record(project: Path) -> dict:  # type: ignore[type-arg]
    (run_dir,) = (project / ".forge" / "runs").iterdir()
    return json.loads((run_dir / "run.json").read_text())


def test_resume_after_ctrl_c_runs_the_interrupted_iteration_again(project: Path) -> None:
    env = {**os.environ, "FAKE_SLEEP": "300"}
    proc = subprocess.Popen(
        [FKS, "run", "fake:1"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(project.parent / "state" / "pid")  # the agent is running its iteration
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    iteration = _record(project)["steps"][0]["iterations"][0]
    assert iteration["reason"] == "interrupted" and iteration["counted"] is False

    done = fks("run", "--resume", "last", cwd=project)
    assert done.code == 0, done.output
    record = _record(project)
    assert record["status"] == "complete"
    assert [it["counted"] for it in record["steps"][0]["iterations"]] == [False, True]


def test_resume_with_no_iteration_left_says_to_give_more(project: Path) -> None:
    done = fks("run", "fake:2", env={"FAKE_MARKER_AT": "0"}, cwd=project)
    assert done.code == 1, done.output
    run_id = _record(project)["id"]
    done = fks("run", "--resume", "last", cwd=project)
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: step 1 (fake) of run {run_id} has used all its 2 iterations; "
        f"allow more with: fks run --resume {run_id} --more N\n"
    )
    assert len(_record(project)["steps"][0]["iterations"]) == 2
    done = fks("run", "--resume", "last", "--more", "1", cwd=project)
    assert done.code == 0, done.output  # one more iteration, which prints the marker
