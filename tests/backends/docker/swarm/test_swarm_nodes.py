"""What each node of a real two-node swarm gets by itself: fks's images, sent through the node's
engine (node label fks.docker-engine) before a task is placed there."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.engines import SecondEngine, TwoNodeSwarm, leftovers
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner.labels import LABEL_ENGINE, LABEL_SOCKET

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]

IMAGES = ("fks-agent:latest", "fks-proxy:latest")
AGENT = """#!/bin/sh
echo hi > hi.txt && git add hi.txt && git commit -qm hi && echo FORKHESTRA_COMPLETE
"""


def label_worker(swarm: TwoNodeSwarm, labels: dict[str, str], *, drain_manager: bool) -> None:
    node = swarm.main.nodes.get(swarm.worker_id)
    spec = node.attrs["Spec"]
    spec["Labels"] = {**(spec.get("Labels") or {}), **labels}
    node.update(spec)
    if drain_manager:
        manager = swarm.main.nodes.get(swarm.manager_id)
        spec = manager.attrs["Spec"]
        spec["Availability"] = "drain"
        manager.update(spec)


@pytest.mark.timeout(900)
def test_a_node_without_the_images_gets_them_by_itself(tmp_path: Path) -> None:
    with SecondEngine() as second, TwoNodeSwarm(second) as swarm:
        assert second.client().images.list() == []
        label_worker(
            swarm,
            {LABEL_ENGINE: second.url, LABEL_SOCKET: str(second.dir / "sock")},
            drain_manager=True,
        )
        swarm.before = {v.name for v in swarm.main.volumes.list()}
        repo = init_repo(tmp_path / "repo", {"README.md": "hello\n", "agent.sh": AGENT})
        (repo / "agent.sh").chmod(0o755)
        write_config(repo, {"sandbox": {"memory": "512m"}})  # allowlist: the proxy's image too
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "agent")
        done = fks("run", "./agent.sh:1", "--sandbox", "--engine", "swarm", cwd=repo, timeout=800)
        assert done.code == 0, done.output
        for image in IMAGES:
            image_id = swarm.main.images.get(image).id
            assert f"fks: sending image {image} ({image_id[7:19]}) to engine {second.url}..." in (
                done.stderr
            ), done.stderr
            assert second.client().images.get(image).id == image_id
        assert git(repo, "log", "--format=%s", "-1", "main") == "hi"
        assert leftovers(swarm, tmp_path) == {}
        again = fks("image", "push", "--engine", "swarm", timeout=300)
        assert again.code == 0, again.output
        for image in IMAGES:
            assert f"{image} (" in again.stdout and f"is on {second.url} already" in again.stdout
