"""A swarm node lost mid-iteration, on a two-node swarm made for each test with a second engine
of its own (the test kills it, with heartbeats every second): the service's execution says so
in one line, and a run's step goes on on the other node."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.engines import SecondEngine, TwoNodeSwarm, of_test
from fks_testing.helpers import fks, git
from fks_testing.swarm import (
    IMAGE,
    services_of,
    set_availability,
    settings,
    slow_repo,
    start_fks,
    wait_for,
)

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.backends.docker.swarm.execution import NodeLostError
from sandbox_runner.backends.docker.swarm.service import ServiceSandbox

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]


@pytest.fixture
def own_swarm() -> Iterator[TwoNodeSwarm]:
    """A swarm with a second engine of its own (this test kills it), heartbeats every second."""
    with SecondEngine() as engine:
        pushed = fks("image", "push", "--engine", engine.url, "--image", IMAGE)
        assert pushed.code == 0, pushed.output
        with TwoNodeSwarm(engine, heartbeat_s=1) as swarm:
            yield swarm


def test_a_node_lost_mid_iteration_raises_node_lost(own_swarm: TwoNodeSwarm) -> None:
    swarm = own_swarm
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    spec = ExecSpec(argv=("sh", "-c", "echo started; sleep 120"), cwd=Path("/tmp"), timeout=90)
    assert swarm.second.process is not None
    with pytest.raises(NodeLostError) as lost, sandbox.start(spec) as execution:
        for _ in execution.chunks():
            os.kill(swarm.second.process.pid, signal.SIGKILL)
            killed = time.monotonic()
    noticed = time.monotonic() - killed
    # Well before the iteration's 90 s timeout (measured: 2.6 s with 1 s heartbeats).
    assert noticed < spec.timeout / 2
    message = str(lost.value)
    assert f"swarm node {swarm.worker_id[:12]}" in message and "went down" in message
    assert "\n" not in message
    assert services_of(swarm.main, run) == []


@pytest.mark.timeout(600)
def test_a_lost_node_makes_its_iteration_incomplete_and_the_step_goes_on_elsewhere(
    tmp_path: Path,
) -> None:
    """The worker runs the step's first iteration (the manager is drained); its engine is
    killed mid-iteration: that iteration is incomplete, naming the node, and the next one runs
    on the manager from the branch as the host has it, and completes."""
    with SecondEngine() as second, TwoNodeSwarm(second, heartbeat_s=1) as swarm:
        pushed = fks("image", "push", "--engine", second.url, "--image", IMAGE, timeout=300)
        assert pushed.code == 0, pushed.output
        repo = slow_repo(tmp_path / "repo")
        before = {v.name for v in swarm.main.volumes.list()}
        set_availability(swarm.main, swarm.manager_id, "drain")
        log = tmp_path / "fks.log"
        process = start_fks(repo, log, "run", "./slow.sh:3", "--sandbox", "--engine", "swarm")
        try:
            wait_for(log, b"STARTED", process, 240)
            set_availability(swarm.main, swarm.manager_id, "active")
            assert second.process is not None
            os.kill(second.process.pid, signal.SIGKILL)  # the engine dies; its address stays
            process.wait(timeout=400)
        finally:
            if process.poll() is None:
                process.kill()
        output = log.read_text()
        assert process.returncode == 0, output
        record = json.loads(next((repo / ".forge" / "runs").glob("*/run.json")).read_text())
        first, *rest = record["steps"][0]["iterations"]
        assert first["marker"] is False and first["reason"] == "export_failed", first
        assert "Iteration 1: swarm node " in output and "went down during the iteration" in output
        assert rest and rest[-1]["reason"] == "marker", rest
        assert git(repo, "log", "--format=%s", "-2", "main").splitlines() == [
            "note 0",
            "slow agent",
        ]
        main = swarm.main
        assert not main.services.list(filters={"label": "fks.run"})
        assert not [
            v.name
            for v in main.volumes.list()
            if "fks-" in v.name
            and v.name not in before
            and of_test(v.attrs.get("Labels"), tmp_path)
        ]
