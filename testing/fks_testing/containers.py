"""Agent containers made the way the sandbox makes them, for the tests that claim its
hardening: production's settings (`backends/docker/settings.container_settings`: the user, the
read-only root and its tmpfs, the limits, the network, the labels), its egress wiring
(`egress/pool.through_proxy`: no network, the proxy's socket volume, forwarders and
environment) and its runner (`runners/container.DockerSandbox`: every capability dropped,
no-new-privileges, an init). A test never builds such a container by hand: what it proves is
then what production does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.backends.docker.checks import gvisor_runtimes
from sandbox_runner.backends.docker.egress.pool import through_proxy
from sandbox_runner.backends.docker.runners.container import (
    ContainerSettings,
    DockerSandbox,
    Mount,
)
from sandbox_runner.backends.docker.settings import container_settings
from sandbox_runner.backends.docker.workspace.export import WORKSPACE
from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE
from sandbox_runner.plan.sandbox import SandboxSettings

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.egress.proxy import EgressProxy

ANY_USER = "12345:12345"
"""A uid:gid that is neither root nor the host user's, nor the image's: any an agent may run
as (a devcontainer's `remoteUser` is given to production the same way)."""


def agent_settings(
    labels: Mapping[str, str],
    *,
    user: str = ANY_USER,
    image: str = DEFAULT_AGENT_IMAGE,
    mounts: Sequence[Mount] = (),
    gvisor: bool = False,
    **sandbox: Any,
) -> ContainerSettings:
    """An iteration's container as `container_settings` makes it from the `sandbox` section's
    settings `sandbox` (`network`, `memory`, `cpus`, `pids_limit`, `runtime`, …; the config's
    defaults for those not given). `gvisor`: the engine runs `runtime` with gVisor."""
    settings = SandboxSettings(**sandbox)
    return container_settings(image, list(mounts), dict(labels), settings, user, gvisor=gvisor)


@dataclass(frozen=True)
class AgentRun:
    """How an agent container's command ended, what it printed (stdout and stderr as they
    came) and `docker inspect` of the container before it was removed."""

    code: int
    output: str
    inspected: dict[str, Any]
    timed_out: bool


def run_agent(
    client: docker.DockerClient,
    settings: ContainerSettings,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> AgentRun:
    """`argv` in one container made by the sandbox's runner from `settings`, in the directory
    the sandbox mounts a step's workspace at (here: none, the image's), removed after."""
    spec = ExecSpec(argv=tuple(argv), cwd=Path(WORKSPACE), env=dict(env or {}), timeout=timeout)
    with DockerSandbox(client, settings).start(spec) as execution:
        output = b"".join(data for _, data in execution.chunks())
        result = execution.wait()
        inspected = client.api.inspect_container(execution.id)
    return AgentRun(result.exit_code, output.decode(errors="replace"), inspected, result.timed_out)


def run_behind_proxy(
    client: docker.DockerClient,
    proxy: EgressProxy,
    script: str,
    *,
    labels: Mapping[str, str],
    runtime: str = "runc",
    timeout: float = 120,
) -> AgentRun:
    """`script` (sh) as the sandbox runs an agent whose step goes out through `proxy` (the
    default network, `allowlist`), under `runtime`, as `ANY_USER`."""
    runs = gvisor_runtimes(client.info().get("Runtimes") or {})
    settings = agent_settings(
        labels, runtime=None if runtime == "runc" else runtime, gvisor=runtime in runs
    )
    settings, env = through_proxy(proxy, settings, {}, [])
    return run_agent(client, settings, ["sh", "-c", script], env=env, timeout=timeout)
