"""The run's egress proxies, one per allow-list (and per whether it carries the model API),
started with the first step that needs each; and a step's container routed through one."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sandbox_runner.backends.docker.egress.glue import SOCKET_DIR
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.egress.upstream import (
    API_ENV,
    api_kinds,
    upstreams_for,
)
from sandbox_runner.backends.docker.runners.container import ContainerSettings, Mount
from sandbox_runner.backends.docker.settings import ALLOWLIST, needs_proxy, network_mode
from sandbox_runner.labels import LABEL_REPO
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.secrets import read_ca_certs, resolve_secrets

if TYPE_CHECKING:
    import docker

    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings
    from sandbox_runner.plan.secrets import Secret


WAIT_FOR = "FKS_WAIT_FOR"
"""Sockets the iteration script waits for before the agent starts (the workspace's script)."""


class Credentials(NamedTuple):
    """What a step's proxy reads on this machine: its secrets' values and the CAs it trusts."""

    secrets: tuple[Secret, ...] = ()
    origin_cas: str = ""


def read_credentials(settings: SandboxSettings, top: Path) -> Credentials:
    """The secrets' values and `caCerts` of `settings` (nothing without secrets or off the
    allow-list), read now: a run reads them once, before any agent runs."""
    if network_mode(settings) != ALLOWLIST or not settings.secrets:
        return Credentials()
    secrets = resolve_secrets(settings.secrets, os.environ, top)
    return Credentials(secrets, read_ca_certs(settings.ca_certs, top))


class ProxyPool:
    """The proxies of run `run_id`; each one lives as long as `stack` (the run's)."""

    def __init__(
        self,
        client: docker.DockerClient,
        run_id: str,
        stack: ExitStack,
        *,
        make: Callable[..., EgressProxy] = EgressProxy,
    ) -> None:
        """`make`: the proxy's kind, called as EgressProxy is (the target's own)."""
        self._client = client
        self._make = make
        self._run_id = run_id
        self._stack = stack
        self._proxies: dict[tuple[object, ...], EgressProxy] = {}

    def for_step(
        self,
        agent: AgentCommand,
        settings: SandboxSettings,
        repo: Repo,
        credentials: Credentials | None = None,
    ) -> EgressProxy | None:
        """The proxy this step goes out through (None: the network is as set), with
        `credentials` read when the run started (read now without them)."""
        if not needs_proxy(settings, agent):
            return None
        allowlist = network_mode(settings) == ALLOWLIST
        allow = tuple(settings.allow) if allowlist else ()
        apis = upstreams_for(api_kinds(agent, settings), os.environ)
        secrets, origin_cas = credentials or read_credentials(settings, repo.top)
        hosts = tuple(sorted(settings.hosts.items()))
        # Steps get a proxy with their own model APIs only: another's socket would be a way to
        # its key; steps without a secret get one without that secret.
        prices = tuple((family, i, o) for family, (i, o) in sorted(settings.model_prices.items()))
        key = (allow, apis, tuple(settings.deny), secrets, hosts, origin_cas, prices)
        if key not in self._proxies:
            proxy = self._make(
                self._client,
                run_id=self._run_id,
                allow=[AllowEntry.parse(entry) for entry in allow],
                apis=apis,
                deny=[AllowEntry.parse(entry) for entry in settings.deny],
                secrets=secrets,
                origin_cas=origin_cas,
                meter=True,
                prices=prices,
                labels={LABEL_REPO: str(repo.top)},
                # Only the proxy resolves names: a local gateway's, allowed host services, and
                # the names of sandbox.hosts.
                extra_hosts={"host.docker.internal": "host-gateway", **dict(hosts)},
                ready_later=True,  # the step's first container starts meanwhile
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
    env = {k: v for k, v in env.items() if k not in API_ENV or k in listed}
    # A secret's source never enters the container, whatever sandbox.env lists.
    env = {k: v for k, v in env.items() if k not in proxy.secret_variables}
    awaited = {WAIT_FOR: " ".join(proxy.awaited_sockets())} if proxy.awaited_sockets() else {}
    return container, {**proxy.env(), **env, **awaited}
