"""What runs on a swarm leave, removed: a run's services, networks and secrets at its end
(`remove_run_services`), and for `fks clean` what dead runs left on any node, their
workspaces' work saved onto their step branches first (`clean_swarm`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.backends.docker.cleanup import salvage_step
from sandbox_runner.backends.docker.engine.client import remove_tolerant, with_retries
from sandbox_runner.backends.docker.swarm.egress import remove_secret
from sandbox_runner.backends.docker.swarm.nodes import find_volumes, sweep_volumes
from sandbox_runner.backends.docker.swarm.task_network import NO_NETWORK_ROLE, remove_network
from sandbox_runner.backends.docker.target import DeadRun, Leftovers, Target
from sandbox_runner.errors import FksError
from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE
from sandbox_runner.labels import LABEL_IMAGE, LABEL_REPO, LABEL_ROLE, LABEL_RUN

if TYPE_CHECKING:
    import docker


class NodeTarget(Target, Protocol):
    """A target whose workspaces are each on one node of several (`SwarmTarget`)."""

    def place(self, workspace: str, node: str) -> None:
        """Workspace volume `workspace` is on `node`: its services are to be pinned there."""
        ...


def remove_run_services(client: docker.DockerClient, run_id: str) -> int:
    """Remove every service of run `run_id` (the keepers of its networks among them), its
    no-network networks and its secrets; returns how many services were removed."""
    wanted = {"label": f"{LABEL_RUN}={run_id}"}
    services = with_retries("services", lambda: client.api.services(filters=wanted))
    for service in services:
        remove_tolerant(functools.partial(client.api.remove_service, service["ID"]))
    networks = client.api.networks(
        filters={"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}={NO_NETWORK_ROLE}"]}
    )
    for network in networks:  # its tasks may still be stopping: they were killed just now
        remove_network(client, network["Id"], wait_s=60)
    for secret in client.api.secrets(filters={"label": f"{LABEL_RUN}={run_id}"}):
        remove_secret(client, secret["ID"])
    return len(services)


def clean_swarm(
    client: docker.DockerClient,
    target: NodeTarget,
    engine: str,
    leftovers: Leftovers,
) -> int:
    """Dead runs on swarm `engine` (as their records name it): their services, then the work
    their workspaces hold, saved onto their step branches (through services pinned to the
    workspaces' nodes), then their volumes on every node."""
    dead = [
        run
        for run in leftovers.dead.values()
        if run.engine == engine and (leftovers.every or run.repos & leftovers.repos)
    ]
    if not dead:
        return 0
    count = 0
    labels = [f"{LABEL_RUN}={record.id}" for record in dead]
    try:
        for record in dead:
            if removed := remove_run_services(client, record.id):
                services = "1 service" if removed == 1 else f"{removed} services"
                print(f"removed {services} of run {record.id} on the swarm")
                count += removed
        found = find_volumes(client, labels, DEFAULT_AGENT_IMAGE)
        for record in dead:
            _salvage_swarm(client, target, record, found, leftovers.repos)
        swept = sweep_volumes(client, labels, DEFAULT_AGENT_IMAGE)
    except FksError as exc:
        print(f"warning: could not clean the swarm: {exc}")
        return count
    for line in swept:
        status, _, name = line.partition(" ")
        if status == "204":
            print(f"removed volume {name} on the swarm")
            count += 1
    return count


def _salvage_swarm(
    client: docker.DockerClient,
    target: NodeTarget,
    record: DeadRun,
    found: dict[str, tuple[str, dict[str, str]]],
    repos: frozenset[str],
) -> None:
    """The work of `record`'s unfinished steps, from their workspaces on the swarm's nodes,
    onto their branches in `repos` (never a repository only the record names)."""
    for step in record.unfinished:
        node, labels = found.get(step.workspace, (None, {}))
        if node is None or labels.get(LABEL_RUN) != record.id or step.repo not in repos:
            continue
        target.place(step.workspace, node)
        labels = {**labels, LABEL_REPO: step.repo}
        labels.setdefault(LABEL_IMAGE, DEFAULT_AGENT_IMAGE)
        salvage_step(client, target, step.workspace, labels, record, step)
