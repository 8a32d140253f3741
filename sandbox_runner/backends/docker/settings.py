"""A step's container as settings: its network mode, its limits, its hardening, the credentials
it gets and the labels `fks clean` and `--resume` find it by. Plain values, no Docker calls."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox_runner.agentclis.claude import CREDENTIAL_VARS
from sandbox_runner.backends.docker.runners.container import ContainerSettings, Mount
from sandbox_runner.git.repo import Repo
from sandbox_runner.labels import LABEL_PID, LABEL_REPO, LABEL_RUN, LABEL_STEP
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.sandbox import SandboxSettings, own_network

# Claude steps get the model API's credentials; other agents only what `sandbox.env` lists.
CLAUDE_ENV = (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL")
DEFAULT_MEMORY = "4g"
DEFAULT_PIDS_LIMIT = 4096
DEFAULT_TIMEOUT = 3600.0
ALLOWLIST = "allowlist"
OPEN = "open"
# The root filesystem is read-only: these (and the workspace) are where an agent may write.
TMPFS = {"/tmp": "rw,exec,mode=1777", "/home/fks": "rw,exec,mode=1777"}
CLI_HOME = "/home/fks/.fks-cli"
"""Where an agent CLI's settings files go in an iteration's container (new with each one)."""


def network_mode(settings: SandboxSettings) -> str:
    """`allowlist` (the default), `open` (`bridge` is the same), `none`, `host`, or the name
    of a Docker network of the user's (`docker:NAME` without its prefix)."""
    mode = own_network(settings.network) or settings.network or ALLOWLIST
    return OPEN if mode == "bridge" else mode


def docker_network(settings: SandboxSettings) -> str:
    mode = network_mode(settings)
    return "bridge" if mode == OPEN else "none" if mode == ALLOWLIST else mode


def needs_proxy(settings: SandboxSettings, agent: AgentCommand) -> bool:
    """Whether the step goes out through the egress proxy: for its allow-list, or, with no
    network, for its model APIs."""
    from sandbox_runner.backends.docker.egress.upstream import api_kinds

    mode = network_mode(settings)
    return mode == ALLOWLIST or (mode == "none" and bool(api_kinds(agent, settings)))


def container_settings(
    image: str,
    mounts: list[Mount],
    labels: dict[str, str],
    settings: SandboxSettings | None = None,
    user: str | None = None,
    *,
    gvisor: bool = False,
) -> ContainerSettings:
    """The hardened container of every sandbox iteration (and of `fks clean`'s exports); it
    runs as your uid:gid unless the image names its user (a devcontainer's remoteUser).
    `gvisor`: the settings' runtime is gVisor's (the engine says so)."""
    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE

    settings = settings or SandboxSettings()
    return ContainerSettings(
        image=image or DEFAULT_AGENT_IMAGE,
        user=user or f"{os.getuid()}:{os.getgid()}",
        mounts=mounts,
        network=docker_network(settings),
        memory=settings.memory or DEFAULT_MEMORY,
        cpus=settings.cpus,
        pids_limit=settings.pids_limit or DEFAULT_PIDS_LIMIT,
        labels=labels,
        tmpfs=TMPFS,
        runtime=settings.runtime,
        gvisor=gvisor and settings.runtime is not None,
    )


def config_files(agent: AgentCommand) -> list[Path]:
    """The Claude config files a step mounts from the user's project (read-only)."""
    cfg = agent.config
    if cfg is None or agent.kind != "claude":
        return []
    root = agent.config_root or agent.cwd
    return [root / ref for ref in (cfg.mcp_config, cfg.settings) if ref]


def step_labels(run_id: str, index: int, repo: Repo) -> dict[str, str]:
    """What `fks clean` and resume find a step's containers by."""
    return {
        LABEL_RUN: run_id,
        LABEL_STEP: str(index),
        LABEL_PID: str(os.getpid()),
        LABEL_REPO: str(repo.top),
    }


def step_env(
    agent: AgentCommand, settings: SandboxSettings, identity: dict[str, str]
) -> dict[str, str]:
    """Credentials only for Claude steps (and agents that list them in `sandbox.env`)."""
    names = [*settings.env, *(CLAUDE_ENV if agent.stream_json else ())]
    env = {name: os.environ[name] for name in names if name in os.environ}
    env.update(identity)
    if agent.kind == "cli" and "GIT_CONFIG_COUNT" not in env:
        env |= WORKSPACE_TRUST
    return env


WORKSPACE_TRUST = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}
"""The image's own trust of the workspace (a volume another uid owns), as command-line config:
an agent CLI's shell may drop git's system config (Gemini CLI's does, keeping these)."""


def describe_sandbox(settings: SandboxSettings, image: str, base: str) -> list[str]:
    """For --dry-run: the container every step gets, and where its work goes."""
    from sandbox_runner.backends.docker.workspace.export import WORKSPACE

    s = settings
    limits = ", ".join(
        part
        for part in (
            f"memory {s.memory or DEFAULT_MEMORY}",
            f"cpus {s.cpus:g}" if s.cpus else "",
            f"pids {s.pids_limit or DEFAULT_PIDS_LIMIT}",
            f"runtime {s.runtime}" if s.runtime else "",
            f"timeout {s.timeout or DEFAULT_TIMEOUT:g}s per iteration",
        )
        if part
    )
    return [
        f"Sandbox: image {s.image or image}, network {network_mode(s)}, "
        f"user {os.getuid()}:{os.getgid()}, read-only root filesystem, {limits}",
        f"Each step runs on a new branch fks/<run-id>/<n>-<agent> from '{base}' "
        f"in a workspace of its own (a Docker volume at {WORKSPACE}), "
        f"merged into '{base}' when it completes",
    ]


def planned_network(settings: SandboxSettings, agent: AgentCommand, top: Path) -> str:
    """For --dry-run and -v: what the step's agent may reach; its secrets by destination,
    header and source (never a value), those not set here marked so."""
    from sandbox_runner.backends.docker.secret_checks import describe_secret

    mode = network_mode(settings)
    from sandbox_runner.backends.docker.egress.upstream import api_kinds

    kinds = api_kinds(agent, settings)
    api = f" and the {' and '.join(kinds)} model API (key added by the proxy)" if kinds else ""
    if mode == ALLOWLIST:
        secrets = ", ".join(describe_secret(e, os.environ, top) for e in settings.secrets)
        allowed = ", ".join(settings.allow) or (
            "the secrets' destinations" if secrets else "nothing"
        )
        hosts = ", ".join(f"{name} at {address}" for name, address in settings.hosts.items())
        return (
            f"allowlist: {allowed}{api}; "
            + (f"secrets added by the proxy: {secrets}; " if secrets else "")
            + (f"names looked up as: {hosts}; " if hosts else "")
            + (f"refused even so: {', '.join(settings.deny)}; " if settings.deny else "")
            + "everything else refused"
        )
    if mode == "none":
        return f"none: no network{api.replace(' and', ' but')}"
    if mode == OPEN:
        return f"{mode}: any address the host reaches"
    if mode == "host":
        return "host: this machine's network, its loopback included"
    return f"Docker network {mode}, as it is (no egress proxy)"
