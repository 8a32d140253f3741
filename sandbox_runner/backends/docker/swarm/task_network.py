"""The network of a swarm task that is to reach nothing.

Swarm has no `none` network for services (only `bridge` and `host` are predefined): such a
task gets an internal overlay network instead, one interface besides `lo` on a subnet where
nothing else is, and no route out of it. (An internal network of the `bridge` driver would be
quicker to join, but its gateway address is the node itself: a task on it reaches every port
the node listens on, its engine's among them.)

Joining an overlay network costs a task about half a second on a node where that network is
not up yet, and a node takes it down when its last task leaves. So a step's iterations share
one network (`StepNetwork`), kept up on the step's node by a keeper: a service that sleeps
there on that network, listening on nothing, with no mount, no capability and a few MB of
memory. The step's iterations run one after the other; nothing else joins the network.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.engine.client import remove_tolerant, with_retries
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError
from sandbox_runner.labels import LABEL_ROLE
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

NO_NETWORK_ROLE = "swarm-no-network"
KEEPER_ROLE = "swarm-network-keeper"
_KEEPER_COMMAND = ["sh", "-c", "while :; do sleep 3600; done"]


def make_network(client: docker.DockerClient, labels: Mapping[str, str]) -> str:
    """A new internal overlay network labelled `labels` (and its role); its id."""
    labels = {**labels, LABEL_ROLE: NO_NETWORK_ROLE}
    name = f"fks-none-{secrets.token_hex(6)}"
    try:
        created = with_retries(
            "network create",
            lambda: client.api.create_network(name, driver="overlay", internal=True, labels=labels),
        )
    except Exception as exc:
        raise SandboxError(
            f"Docker could not create the swarm task's network: {one_line(exc)}"
        ) from None
    return str(created["Id"])


def remove_network(client: docker.DockerClient, network_id: str, *, wait_s: float = 10) -> None:
    """A network is in use until the tasks that had it are gone (a task on an overlay network
    takes seconds to leave it): try for `wait_s`."""
    import docker.errors

    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.api.remove_network(network_id)
            return
        except docker.errors.NotFound:
            return
        except (docker.errors.APIError, OSError) as exc:
            if "not found" in str(getattr(exc, "explanation", "") or "").lower():
                return  # being removed already (a swarm manager says so with a 500)
            if time.monotonic() >= deadline:
                return  # `remove_run_services` takes it later
            time.sleep(0.2)


class StepNetwork:
    """The network a step's tasks share when they are to reach nothing, and its keeper on the
    step's node (see the module). Made by the first task that needs it; `close` removes both
    (and `remove_run_services` does, after a kill)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self.id: str | None = None
        self._keeper: str | None = None
        self._kept_on: str | None = None

    def join(self, labels: Mapping[str, str], node: str | None, image: str) -> str:
        """The network's id (made now if it is not yet), kept up on `node` when it is known."""
        if self.id is None:
            self.id = make_network(self._client, labels)
        if node is not None and node != self._kept_on:
            self._remove_keeper()
            self._keeper = self._start_keeper(labels, node, image)
            self._kept_on = node
        return self.id

    def _start_keeper(self, labels: Mapping[str, str], node: str, image: str) -> str | None:
        """The keeper's service on `node` (its start is not waited for: without it, tasks only
        take longer to join). None if Swarm would not take it."""
        import docker.errors

        labels = {**labels, LABEL_ROLE: KEEPER_ROLE}
        template: dict[str, Any] = {
            "ContainerSpec": {
                "Image": image,
                "Command": _KEEPER_COMMAND,
                "User": "65534:65534",
                "Labels": labels,
                "ReadOnly": True,
                "CapabilityDrop": ["ALL"],
                "Init": True,
                "StopSignal": "SIGKILL",
            },
            "Resources": {"Limits": {"MemoryBytes": 16 << 20, "Pids": 8, "NanoCPUs": 10**8}},
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
            "Placement": {"Constraints": [f"node.id=={node}"]},
            "Networks": [{"Target": self.id}],
        }
        mode = {"Replicated": {"Replicas": 1}}
        with contextlib.suppress(docker.errors.APIError):
            created = with_retries(
                "service create",
                lambda: self._client.api.create_service(template, labels=labels, mode=mode),
            )
            return str(created["ID"])
        return None

    def _remove_keeper(self) -> None:
        import docker.errors

        keeper, self._keeper, self._kept_on = self._keeper, None, None
        if keeper is not None:
            with contextlib.suppress(docker.errors.APIError):
                remove_tolerant(lambda: self._client.api.remove_service(keeper))

    def close(self) -> None:
        """Remove the keeper, then the network (once the last task has left it)."""
        with deferred_signals():
            self._remove_keeper()
            network, self.id = self.id, None
            if network is not None:
                remove_network(self._client, network)
