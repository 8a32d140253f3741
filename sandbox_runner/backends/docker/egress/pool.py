"""The run's egress proxies, one per allow-list (and per whether it carries the model API),
started with the first step that needs each; and a step's container routed through one."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.egress.proxy import SOCKET_DIR, ApiUpstream, EgressProxy
from sandbox_runner.backends.docker.runners.container import ContainerSettings, Mount
from sandbox_runner.backends.docker.settings import ALLOWLIST, CLAUDE_ENV, needs_proxy, network_mode
from sandbox_runner.labels import LABEL_REPO
from sandbox_runner.plan.allow import AllowEntry

if TYPE_CHECKING:
    import docker

    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings


class ProxyPool:
    """The proxies of run `run_id`; each one lives as long as `stack` (the run's)."""

    def __init__(self, client: docker.DockerClient, run_id: str, stack: ExitStack) -> None:
        self._client = client
        self._run_id = run_id
        self._stack = stack
        self._proxies: dict[tuple[tuple[str, ...], bool], EgressProxy] = {}

    def for_step(
        self, agent: AgentCommand, settings: SandboxSettings, repo: Repo
    ) -> EgressProxy | None:
        """The proxy this step goes out through (None: the network is as set)."""
        if not needs_proxy(settings, agent):
            return None
        allow = tuple(settings.allow) if network_mode(settings) == ALLOWLIST else ()
        api = ApiUpstream.from_env(os.environ) if agent.stream_json else None
        # Steps without the model API get a proxy without it: its socket would be a way to the key.
        key = (allow, api is not None)
        if key not in self._proxies:
            proxy = EgressProxy(
                self._client,
                run_id=self._run_id,
                allow=[AllowEntry.parse(entry) for entry in allow],
                api=api,
                labels={LABEL_REPO: str(repo.top)},
                # Only the proxy resolves names: a local gateway's, and allowed host services.
                extra_hosts={"host.docker.internal": "host-gateway"},
            )
            self._proxies[key] = self._stack.enter_context(proxy)
        return self._proxies[key]


def through_proxy(
    proxy: EgressProxy, container: ContainerSettings, env: dict[str, str], listed: Sequence[str]
) -> tuple[ContainerSettings, dict[str, str]]:
    """No network of its own: the proxy's sockets, its forwarders, a placeholder credential
    (credentials the agent lists in `sandbox.env` it gets: its choice)."""
    socket = Mount(source=proxy.volume_name, target=SOCKET_DIR, read_only=True, volume=True)
    container = replace(
        container,
        network="none",
        mounts=[*container.mounts, socket],
        entry=tuple(proxy.wrap_argv([])),
        join_entry=tuple(proxy.wait_argv([])),
    )
    env = {k: v for k, v in env.items() if k not in CLAUDE_ENV or k in listed}
    return container, {**proxy.env(), **env}
