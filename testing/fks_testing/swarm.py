"""What the swarm tests share besides the swarm itself (`engines`): a step's containers as
production makes them for a service, a slow agent's repository, and `fks` run in the background
with its output in a file."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from fks_testing.containers import agent_settings
from fks_testing.helpers import FKS, git, init_repo, write_config
from sandbox_runner.backends.docker.runners.container import ContainerSettings, Mount

IMAGE = "fks-agent:latest"

SLOW = """#!/bin/sh
n=$(ls notes 2>/dev/null | wc -l)
mkdir -p notes && echo "note $n" > notes/n$n.txt && git add notes && git commit -qm "note $n"
echo STARTED
sleep 15
echo FORKHESTRA_COMPLETE
"""
"""An agent that commits a note, says STARTED and completes 15 s later."""


def settings(
    run: str, *, network: str = "open", image: str = IMAGE, mounts: Sequence[Mount] = ()
) -> ContainerSettings:
    """A step's containers as production makes them (`sandbox.network` `network`), as the
    image's user, with small limits."""
    return agent_settings(
        {"fks.run": run},
        user="1000:1000",
        image=image,
        mounts=mounts,
        network=network,
        memory="512m",
        cpus=0.5,
        pids_limit=200,
    )


def services_of(client: docker.DockerClient, run: str) -> list[Any]:
    return list(client.api.services(filters={"label": f"fks.run={run}"}))


def set_availability(client: docker.DockerClient, node_id: str, availability: str) -> None:
    node = client.nodes.get(node_id)
    spec = node.attrs["Spec"]
    spec["Availability"] = availability
    node.update(spec)


def slow_repo(path: Path, agent: str = SLOW) -> Path:
    repo = init_repo(path, {"README.md": "hello\n", "slow.sh": agent})
    (repo / "slow.sh").chmod(0o755)
    write_config(repo, {"sandbox": {"network": "none", "memory": "512m"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "slow agent")
    return repo


def start_fks(repo: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [FKS, *args], cwd=repo, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_for(log: Path, text: bytes, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_bytes():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
