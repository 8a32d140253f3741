"""Ctrl-C and SIGTERM: the agent's whole process group is killed, nothing is left, exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fks_testing.helpers import FKS


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with Path(f"/proc/{pid}/stat").open() as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_kills_agent_group_and_exits_130(project: Path, sig: signal.Signals) -> None:
    state = project.parent / "state"
    env = {**os.environ, "FAKE_SLEEP": "120", "FAKE_CHILD": "1", "FAKE_MARKER_AT": "0"}
    exe = FKS
    proc = subprocess.Popen(
        [exe, "run", "fake:5"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(state / "child.pid")
        wait_for(state / "pid")  # written after child.pid
        # What the agent printed is in the log before the signal (fks does not read on once
        # it is interrupted).
        logs = project / ".forge" / "runs"
        deadline = time.monotonic() + 240
        while not any("fake agent iteration 1" in p.read_text() for p in logs.glob("*/01-*/*.log")):
            assert time.monotonic() < deadline, "the agent's line never reached its log"
            time.sleep(0.05)
        agent_pid = int((state / "pid").read_text())
        child_pid = int((state / "child.pid").read_text())
        assert alive(agent_pid) and alive(child_pid)
        started = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=100)
        assert proc.returncode == 130, (out, err)
        assert time.monotonic() - started < 60  # not the agent's 120 s
        assert "Traceback" not in err
        assert "fks run --resume" in err
        deadline = time.monotonic() + 60
        while (alive(agent_pid) or alive(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(agent_pid), "agent left running"
        assert not alive(child_pid), "agent's child left running"
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = (project / ".forge" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted"
    assert record["steps"][0]["status"] == "interrupted"
    assert record["steps"][0]["iterations"][0]["reason"] == "interrupted"
    log = run_dir / record["steps"][0]["iterations"][0]["log"]
    assert "fake agent iteration 1" in log.read_text()


def test_timeout_kills_grandchildren_after_agent_exit(project: Path) -> None:
    """An agent that exits but leaves a background child holding stdout does not hang the loop."""
    seconds = f"{300 + os.getpid() % 1000}.{time.time_ns() % 10**6}"  # unique to this test
    script = project / "leaky.sh"
    script.write_text(f"#!/bin/sh\n(sleep {seconds} &)\necho FORKHESTRA_COMPLETE\n")
    script.chmod(0o755)
    exe = FKS
    started = time.monotonic()
    done = subprocess.run(
        [exe, "run", "./leaky.sh:2"], cwd=project, capture_output=True, text=True, timeout=200
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 150  # not the background child's 300 s and more
    leftover = subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "background child left running"


def test_ctrl_c_reaches_the_agent_as_sigint_first(project: Path) -> None:
    """Seed: Ctrl-C forwards SIGINT to the agent, which may wrap up (SIGTERM, SIGKILL follow)."""
    script = project / "polite.sh"
    script.write_text(
        "#!/bin/sh\ntrap 'echo got-INT > got.txt; exit 3' INT\ntrap 'echo got-TERM > got.txt' TERM\n"
        # Waits in the shell's `wait`, which a trapped signal ends at once (a loop of short
        # sleeps forks all along: on a loaded machine its trap could miss the grace).
        "touch started\nsleep 300 &\nwait\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen(
        [FKS, "run", "./polite.sh:2"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(project / "started")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert (project / "got.txt").read_text() == "got-INT\n"
