"""An agent printing without end cannot fill the disk: iteration logs are bounded per iteration
and per run, and the run record says what was cut (local runs; see
tests/backends/docker/runners/test_output_bounds.py for the sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.helpers import fks, write_config

# Prints `SIZE` bytes (default 5 MB), then the marker once it has run `MARK_AT` times.
FLOOD = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
head -c "${SIZE:-5000000}" /dev/zero | tr '\\0' A
echo
if [ "$n" -ge "${MARK_AT:-1}" ]; then echo FORKHESTRA_COMPLETE; fi
"""


def flood(project: Path) -> str:
    agent = project / "flood.sh"
    agent.write_text(FLOOD)
    agent.chmod(0o755)
    return "./flood.sh"


def the_record(project: Path) -> tuple[Path, dict]:
    (run_dir,) = (project / ".forge" / "runs").iterdir()
    return run_dir, json.loads((run_dir / "run.json").read_text())


def test_an_agent_flooding_its_output_is_cut_at_the_iteration_limit(project: Path) -> None:
    res = fks("run", f"{flood(project)}:2", cwd=project, env={"FKS_MAX_LOG_BYTES": "100000"})
    assert res.code == 0, res.output[-2000:]  # the agent kept running: its marker still counted
    run_dir, rec = the_record(project)
    (it,) = rec["steps"][0]["iterations"]
    assert it["marker"] is True
    log = run_dir / it["log"]
    assert log.stat().st_size <= 100_000 and it["log_bytes"] == log.stat().st_size
    assert it["log_dropped"] > 4_800_000  # everything past the bound, counted
    text = log.read_text()
    assert "[fks] output cut here: it passed the log limit of 100,000 bytes per iteration" in text
    assert f"[fks] {it['log_dropped']:,} bytes of output were not kept" in text
    assert "neither kept nor shown" in res.stdout
    assert len(res.stdout) < 200_000  # nor is the screen flooded
    shown = fks("show", "last", cwd=project)
    assert f"log cut: {it['log_dropped']:,} bytes" in shown.stdout, shown.output


def test_the_run_limit_bounds_all_iterations_together(project: Path) -> None:
    write_config(project, {"maxLogBytes": 100_000, "maxRunLogBytes": 150_000})
    res = fks("run", f"{flood(project)}:3", cwd=project, env={"SIZE": "80000", "MARK_AT": "3"})
    assert res.code == 0, res.output[-2000:]
    run_dir, rec = the_record(project)
    its = rec["steps"][0]["iterations"]
    sizes = [(run_dir / it["log"]).stat().st_size for it in its]
    assert sum(sizes) <= 150_000 and sizes == [it["log_bytes"] for it in its]
    assert its[0]["log_dropped"] == 0 and sizes[0] == 80_001  # the first whole
    assert its[1]["log_dropped"] > 0 and its[2]["log_dropped"] > 80_000
    assert "the run's log limit of 150,000 bytes" in (run_dir / its[1]["log"]).read_text()
    assert its[2]["marker"] is True


@pytest.mark.parametrize("value", ["lots", "0", "-5"])
def test_a_bad_log_limit_is_a_usage_error_before_anything_starts(project: Path, value: str) -> None:
    res = fks("run", f"{flood(project)}:2", cwd=project, env={"FKS_MAX_LOG_BYTES": value})
    assert res.code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"fks: FKS_MAX_LOG_BYTES must be a positive number of bytes, got {value!r}"
    ]
    assert not (project / ".forge").exists()
