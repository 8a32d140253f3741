"""The egress proxy on a Docker Swarm: the same Squid and the same Unix sockets as on one
engine, run as a global service (one task on every node), so that an agent's task, on network
none, finds the proxy's socket volume on whichever node it runs.

The volume has the same name on every node: each node's proxy task makes its own (node-local,
labelled with the run: swept with the run's other volumes). The Squid config, which holds the
model key and the secrets, is a swarm secret mounted into the proxy's tasks only: neither
`docker service inspect` nor an agent's task shows it. The access log comes back through the
service's log stream, every node's lines tagged with their node.
"""

from __future__ import annotations

import collections
import contextlib
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.egress.access_log import access_line
from sandbox_runner.backends.docker.egress.glue import (
    FORWARD_SOCKET,
    READY_LINE,
    SOCKET_DIR,
    proxy_script,
)
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.engine.client import remove_tolerant, with_retries
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import docker

_NODE_RE = re.compile(r"com\.docker\.swarm\.node\.id=([a-z0-9]+)")
_ENDED = frozenset({"complete", "failed", "rejected", "shutdown", "orphaned"})
_NODES_TRACKED = 1000  # nodes whose last output lines are kept (for an error message)
_SOCKET_WAIT_S = 60
"""How long an agent's task waits for its node's proxy (a node that joined after the proxy
started gets its task then)."""


class SwarmEgressProxy(EgressProxy):
    """The run's proxy as a global swarm service (see the module); used as EgressProxy is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("ready_timeout", 120.0)  # a node may take its time to start a task
        kwargs["meter"] = False  # a proxy on each node: no one meter sees a step's spend
        super().__init__(*args, **kwargs)
        self._secret_ids: list[str] = []
        self._ready_nodes: set[str] = set()
        self._tails: dict[str, collections.deque[str]] = {}

    def _start(self) -> None:
        """The config as swarm secrets, the global service, its log followed, every node ready."""
        mounts = self._make_secrets()
        self._container = self._create_service(mounts)
        threading.Thread(target=self._follow_log, name="fks-egress-log", daemon=True).start()
        self._wait_ready()

    def wrap_argv(self, argv: Sequence[str]) -> list[str]:
        """As on one engine, once the node's proxy made its socket."""
        wait = (
            f"i=0; until [ -S {FORWARD_SOCKET} ]; do i=$((i + 1)); "
            f"[ $i -lt {_SOCKET_WAIT_S * 10} ] || "
            "{ echo 'fks: the egress proxy did not start on this swarm node' >&2; exit 125; }; "
            'sleep 0.1; done; exec "$@"'
        )
        return ["sh", "-c", wait, "sh", *super().wrap_argv(argv)]

    # --- the secrets and the service ----------------------------------------------------------

    def _make_secrets(self) -> list[dict[str, Any]]:
        """squid.conf (and the origin CAs) as swarm secrets; their references for the tasks."""
        references = []
        for path, text in self._config_files().items():
            name = f"{self.volume_name}-{path.rsplit('/', 1)[-1]}-{secrets.token_hex(4)}"
            created = with_retries("secret create", self._secret_maker(name, text))
            self._secret_ids.append(str(created["ID"]))
            references.append(
                {
                    "File": {"Name": path, "UID": "0", "GID": "0", "Mode": 0o444},
                    "SecretID": str(created["ID"]),
                    "SecretName": name,
                }
            )
        return references

    def _secret_maker(self, name: str, text: str) -> Callable[[], dict[str, Any]]:
        def create() -> dict[str, Any]:
            created: dict[str, Any] = self._client.api.create_secret(
                name, text.encode(), labels=self._labels
            )
            return created

        return create

    def _create_service(self, secret_refs: list[dict[str, Any]]) -> str:
        import docker.errors

        hosts = [f"{ip} {name}" for name, ip in self._extra_hosts.items() if ip != "host-gateway"]
        container: dict[str, Any] = {
            "Image": self._image_ref(),
            "Command": ["sh", "-c", proxy_script(self._glue, self._run_id)],
            "User": "proxy",
            "Labels": self._labels,
            "Mounts": [
                {
                    "Type": "volume",
                    "Source": self.volume_name,
                    "Target": SOCKET_DIR,
                    "VolumeOptions": {"Labels": self._labels},
                }
            ],
            "Secrets": secret_refs,
            "Hosts": hosts,
            "CapabilityDrop": ["ALL"],
            "Init": True,
        }
        template = {
            "ContainerSpec": container,
            "Resources": {"Limits": {"MemoryBytes": 256 << 20, "Pids": 256}},
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
            "LogDriver": {"Name": "json-file", "Options": {"max-size": "16m", "max-file": "2"}},
        }
        try:
            created = with_retries(
                "service create",
                lambda: self._client.api.create_service(
                    template, name=self.volume_name, labels=self._labels, mode={"Global": {}}
                ),
            )
        except docker.errors.APIError as exc:
            raise SandboxError(
                "Docker could not create the swarm's egress proxy service: "
                f"{one_line(str(exc.explanation or exc))}"
            ) from None
        return str(created["ID"])

    def _image_ref(self) -> str:
        """The image by id, as for the agent's tasks (no registry lookup on the nodes)."""
        import docker.errors

        with contextlib.suppress(docker.errors.ImageNotFound):
            return str(self._client.images.get(self._image).id)
        return self._image

    # --- ready, and the access log ------------------------------------------------------------

    def _wait_ready(self) -> None:
        """Until the proxy's task on every available node said READY_LINE."""
        deadline = time.monotonic() + self._ready_timeout
        while True:
            wanted = self._available_nodes()
            for node, state, error in self._task_states():
                if state in _ENDED:
                    raise self._not_started(node, f"{state}: {error or 'no reason given'}")
            with self._log_lock:
                ready = set(self._ready_nodes)
            if wanted and wanted <= ready:
                return
            if time.monotonic() > deadline:
                late = sorted(wanted - ready)[0] if wanted - ready else "?"
                raise self._not_started(late, f"not ready after {self._ready_timeout:.0f} s")
            time.sleep(0.1)

    def _available_nodes(self) -> set[str]:
        nodes = with_retries("nodes", lambda: self._client.api.nodes())
        return {
            str(n["ID"])
            for n in nodes
            if (n.get("Status") or {}).get("State") == "ready"
            and (n.get("Spec") or {}).get("Availability") == "active"
        }

    def _task_states(self) -> list[tuple[str, str, str]]:
        tasks = with_retries(
            "tasks", lambda: self._client.api.tasks(filters={"service": self._container})
        )
        return [
            (
                str(t.get("NodeID") or "?"),
                str((t.get("Status") or {}).get("State", "new")),
                one_line(str((t.get("Status") or {}).get("Err") or "")),
            )
            for t in tasks
        ]

    def _not_started(self, node: str, what: str) -> SandboxError:
        with self._log_lock:
            tail = " | ".join(self._tails.get(node, ())) or "no output"
        return SandboxError(
            f"The egress proxy ({self._image}) on swarm node {node[:12]} {what}: {tail}; "
            "is the image on every node ('fks image push --engine swarm')?"
        )

    def _open_log(self) -> Any:
        """Every node's task's output (its READY_LINE, its access log), each line tagged with
        its node."""
        return self._client.api.service_logs(
            self._container, details=True, follow=True, stdout=True, stderr=True
        )

    def _take_line(self, line: str) -> None:
        """A line of a node's task: a request (counted), its ready line, or output kept for
        an error message."""
        details, _, text = line.partition(" ")
        tagged = _NODE_RE.search(details)
        node = tagged.group(1) if tagged else "?"
        if (request := access_line(text)) is not None:  # the audit's and the refusals'
            self._count(request)
            return
        with self._log_lock:
            if text.strip() == READY_LINE:  # the whole line: a request's URL cannot be it
                self._ready_nodes.add(node)
            if len(self._tails) < _NODES_TRACKED:
                self._tails.setdefault(node, collections.deque(maxlen=5)).append(text.strip())

    def _remove(self, *, quiet: bool) -> None:
        """The service, then its secrets; the volumes go with the run's (swept on every node)."""
        with deferred_signals():
            if self._log_stream is not None:
                with contextlib.suppress(Exception):
                    self._log_stream.close()
            if self._container is not None:
                service, self._container = self._container, None
                remove_tolerant(lambda: self._client.api.remove_service(service))
            for secret in self._secret_ids:
                remove_secret(self._client, secret, quiet=quiet)
            self._secret_ids = []


def remove_secret(client: docker.DockerClient, secret: str, *, quiet: bool = True) -> None:
    """Remove a swarm secret; one still referenced by a service being removed is tried again
    for a few seconds."""
    import docker.errors

    deadline = time.monotonic() + 10
    while True:
        try:
            client.api.remove_secret(secret)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if time.monotonic() >= deadline:
                if quiet:
                    return
                raise SandboxError(
                    f"Could not remove the swarm secret {secret[:12]}: "
                    f"{one_line(str(exc.explanation or exc))}"
                ) from None
            time.sleep(0.2)
