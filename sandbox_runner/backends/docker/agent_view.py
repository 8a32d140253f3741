"""A step's agent as its container sees it: the repository the step works in (the run's, or a
Claude agent project's own), the agent's directory in the workspace, and what is mounted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sandbox_runner.backends.docker.runners.container import Mount
from sandbox_runner.backends.docker.settings import config_files
from sandbox_runner.backends.docker.workspace.export import WORKSPACE
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.errors import AgentNotFoundError, WorkspaceError
from sandbox_runner.git.repo import (
    Repo,
    current_branch,
    exclude_forge_dir,
    not_committed,
    open_repo,
    require_base,
)
from sandbox_runner.paths import inside_project
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.sandbox import SandboxSettings


def step_repo(agent: AgentCommand, repo: Repo, base: str, cwd: Path) -> tuple[Repo, str, Path]:
    """The repository a step works in, its base branch, and the agent's directory in it
    (`repo`, `base` and `cwd`: the run's)."""
    if agent.kind == "claude-agent" and agent.project is not None:
        own = open_repo(agent.project, what=f"--sandbox (agent '{agent.name}')")
        if own.common_dir != repo.common_dir:
            own_base = current_branch(own.top)
            if own_base is None:
                raise WorkspaceError(
                    f"HEAD is detached in {own.top} (agent '{agent.name}'); check out a branch there"
                )
            require_base(own, own_base)
            exclude_forge_dir(own.top)
            return own, own_base, agent.project.relative_to(own.top)
        return repo, base, agent.project.relative_to(repo.top)
    return repo, base, cwd.relative_to(repo.top)


def check_committed(agent: AgentCommand, step_agent: str, repo: Repo, base: str) -> None:
    """An agent given as a path in the repository runs from the step's workspace, which
    holds exactly the base's last commit: it must be in it."""
    program = Path(agent.program)
    if agent.kind != "binary" or not program.is_absolute():
        return
    if not program.is_relative_to(repo.top):
        return
    why = not_committed(repo, base, program)
    if why is not None:
        raise AgentNotFoundError(
            f"agent '{step_agent}' is not in the last commit of '{base}', and the sandbox's "
            f"workspace holds only what is: {why}"
        )


def container_agent(host_view: AgentCommand, repo: Repo, relative: Path, cwd: Path) -> AgentCommand:
    """The agent as the container sees it: in the workspace, config files from the project."""
    workdir = Path(WORKSPACE) / relative
    agent = replace(host_view, cwd=workdir)
    if host_view.kind == "claude-agent":
        agent = replace(agent, project=workdir)
    elif host_view.kind == "binary" and Path(host_view.program).is_absolute():
        program = Path(host_view.program)
        if program.is_relative_to(repo.top):
            agent = replace(agent, program=str(Path(WORKSPACE) / program.relative_to(repo.top)))
    # Claude config files are read from the user's project, mounted read-only where they are.
    return replace(agent, config_root=cwd)


def planned_agent(
    agent: AgentCommand, repo: Repo, base: str, cwd: Path
) -> tuple[AgentCommand, str]:
    """For --dry-run and -v: the agent as its container runs it, and its directory there."""
    own, _base, relative = step_repo(agent, repo, base, cwd)
    shown = container_agent(agent, own, relative, cwd)
    return shown, f"{shown.cwd} (in the container)"


def step_mounts(
    agent: AgentCommand, settings: SandboxSettings, workspace: VolumeWorkspace
) -> list[Mount]:
    """The step's workspace volume, `sandbox.mounts` and the Claude config files, read-only."""
    mounts = workspace.mounts() + [Mount(source=m, read_only=True) for m in settings.mounts]
    mounts += [
        Mount(source=str(inside_project(f, "Claude config file")), target=str(f), read_only=True)
        for f in config_files(agent)
    ]
    return mounts
