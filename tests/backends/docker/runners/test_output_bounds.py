"""An agent printing without end in its container fills neither fks's logs nor Docker's own
store of the container's output on the host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fks_testing.helpers import FKS, fks, git
from fks_testing.sandboxed import add_script, record, sandbox

pytestmark = pytest.mark.docker

LIMIT = 1_000_000
FLOOD_BYTES = 5 * LIMIT
"""Five times fks's bound on a log and Docker's own on a container's output (1m): far over
both, yet quick to make, send and read."""
FLOOD = f"head -c {FLOOD_BYTES} /dev/zero | tr '\\0' A; echo"


def test_a_flooding_agent_is_cut_and_its_marker_still_counts(repo: Path) -> None:
    add_script(
        repo,
        "flood.sh",
        f"#!/bin/sh\necho x > x.txt && git add x.txt && git commit -qm x\n{FLOOD}\n"
        "echo FORKHESTRA_COMPLETE\n",
    )
    res = sandbox("./scripts/flood.sh:2", env={"FKS_MAX_LOG_BYTES": str(LIMIT)})
    assert res.code == 0, res.output[-2000:]
    assert git(repo, "log", "-1", "--format=%s", "main") == "x"  # the work landed
    rec = record(repo)
    (it,) = rec["steps"][0]["iterations"]
    log = repo / ".forge" / "runs" / rec["id"] / it["log"]
    assert log.stat().st_size <= LIMIT and it["log_bytes"] == log.stat().st_size
    assert it["log_dropped"] >= FLOOD_BYTES - LIMIT
    assert "[fks] output cut here" in log.read_text()
    assert len(res.stdout) < 2 * LIMIT


def test_docker_keeps_only_a_bounded_tail_of_a_running_flood(repo: Path, tmp_path: Path) -> None:
    """The agent floods, then waits: while its container runs, what Docker stored of its output
    (`docker logs`) stays small; Ctrl-C then stops it as usual."""
    add_script(repo, "flood.sh", f"#!/bin/sh\n{FLOOD}\necho flooded\nsleep 300\n")
    shown = tmp_path / "stdout"
    with shown.open("w") as screen:  # read by nobody while it runs: a pipe would fill up
        proc = subprocess.Popen(
            [FKS, "run", "./scripts/flood.sh:1", "--sandbox"],
            cwd=repo,
            env={**os.environ, "FKS_MAX_LOG_BYTES": str(LIMIT)},
            stdout=screen,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        deadline = time.monotonic() + 240
        runs = repo / ".forge" / "runs"
        while not any("[fks] output cut here" in p.read_text() for p in runs.glob("*/01-*/*.log")):
            assert time.monotonic() < deadline and proc.poll() is None, "the output was never cut"
            time.sleep(0.2)
        run_id = record(repo)["id"]
        container = agent_container(run_id)
        stored = 0
        while proc.poll() is None and time.monotonic() < deadline:  # until it has all been sent
            logs = subprocess.run(["docker", "logs", container], capture_output=True, check=False)
            stored = len(logs.stdout) + len(logs.stderr)
            if b"flooded" in logs.stdout:
                break
            time.sleep(0.2)
        assert 0 < stored <= 2 * 2**20, stored
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        fks("clean", cwd=repo)
    assert proc.returncode == 130, shown.read_text()[-2000:] + err
    assert shown.stat().st_size < 2 * LIMIT
    it = json.loads((runs / run_id / "run.json").read_text())["steps"][0]["iterations"][0]
    assert it["log_dropped"] > 0 and it["log_bytes"] <= LIMIT


def agent_container(run_id: str) -> str:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-q",
            "--filter",
            f"label=fks.run={run_id}",
            "--filter",
            "label=fks.step=1",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(out) == 1, out
    return out[0]
