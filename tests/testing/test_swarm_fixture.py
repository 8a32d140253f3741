"""The two-node swarm helper (testing/fks_testing/engines.py): both engines are Ready nodes, a one-shot job
constrained to the second node runs there, and both nodes have left it afterwards."""

from __future__ import annotations

import time
from typing import Any

import docker
import pytest
from fks_testing.engines import TwoNodeSwarm
from fks_testing.helpers import fks

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]

IMAGE = "fks-proxy:latest"


def test_a_job_runs_on_the_second_node_and_the_swarm_is_left(second_engine: Any) -> None:
    pushed = fks("image", "push", "--engine", second_engine.url, "--image", IMAGE)
    assert pushed.code == 0, pushed.output
    with TwoNodeSwarm(second_engine) as swarm:
        main = swarm.main
        nodes = {n.id: n.attrs["Status"]["State"] for n in main.nodes.list()}
        assert nodes == {swarm.manager_id: "ready", swarm.worker_id: "ready"}
        service = main.services.create(
            IMAGE,
            ["true"],
            name=f"fkse-job-{swarm.worker_id[:8]}",
            mode=docker.types.ServiceMode("replicated-job"),
            restart_policy=docker.types.RestartPolicy(condition="none"),
            constraints=[f"node.id=={swarm.worker_id}"],
        )
        try:
            task = wait_for_task(service)
            assert task["NodeID"] == swarm.worker_id
            assert task["Status"]["State"] == "complete", task["Status"]
            assert task["Status"]["ContainerStatus"]["ExitCode"] == 0
        finally:
            service.remove()
    assert main.info()["Swarm"]["LocalNodeState"] == "inactive"
    assert second_engine.client().info()["Swarm"]["LocalNodeState"] == "inactive"


def wait_for_task(service: Any, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tasks = service.tasks()
        done = [t for t in tasks if t["Status"]["State"] in ("complete", "failed", "rejected")]
        if done:
            return dict(done[0])
        time.sleep(0.3)
    raise AssertionError(f"the job's task did not finish: {service.tasks()}")
