"""`fks validate`: load the config and check everything that can be checked without running."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.checks import check_engine, check_static
from sandbox_runner.backends.docker.secret_checks import secret_problems
from sandbox_runner.console.output import plural
from sandbox_runner.errors import EXIT_COMPLETE, ConfigError, FksError
from sandbox_runner.git.runner import git_toplevel
from sandbox_runner.notify import events as notify_events
from sandbox_runner.paths import project_dir
from sandbox_runner.plan.checks import problems_error
from sandbox_runner.plan.config import (
    ChainsConfig,
    config_path,
    load_config,
    missing_vars,
)
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.programs import find_program

if TYPE_CHECKING:
    import docker


def run(*, cwd: Path | None, config: Path | None) -> int:
    workdir = project_dir(cwd, config=config)
    path = config_path(workdir, config)
    cfg = load_config(path, cwd=workdir, required=True, needed_by="fks validate", agents_of="all")
    assert cfg is not None
    problems = [
        f"chains.{name}.steps[{i}].agent: variables are not allowed in agent names"
        for name, chain in cfg.chains.items()
        for i, step in enumerate(chain.steps)
        if step.agent not in cfg.agents and missing_vars([step.agent], {})
    ]
    problems += static_sandbox_problems(cfg)
    problems += sandbox_secret_problems(cfg, _repo_top(workdir))
    problems += _notify_problems(cfg)
    if problems:
        raise problems_error(str(path), problems)
    engine = check_sandbox_settings(cfg, path)
    print(f"{path}: OK ({plural(len(cfg.agents), 'agent')}, {plural(len(cfg.chains), 'chain')})")
    if not engine:
        print("  (no Docker engine answered: sandbox CPU limits not checked)")
    for name, variables in _needs(cfg).items():
        if variables:
            print(f"  chain '{name}' needs: {', '.join(variables)}")
    for agent in _unknown_programs(cfg):
        print(f"  agent '{agent}' is not defined and not on PATH (fine if the image has it)")
    return EXIT_COMPLETE


def _notify_problems(cfg: ChainsConfig) -> list[str]:
    """The first `notify` entry whose URL is unset or unusable (each is read and parsed)."""
    try:
        notify_events.configured(cfg)
    except ConfigError as exc:
        return [str(exc)]
    return []


def _needs(cfg: ChainsConfig) -> dict[str, list[str]]:
    """The variables each chain needs."""
    return {
        name: missing_vars(
            [
                c.prompt,
                c.prompt_file,
                *(t for s in c.steps for t in (*s.args, s.prompt, s.prompt_file)),
            ],
            {},
        )
        for name, c in cfg.chains.items()
    }


def _unknown_programs(cfg: ChainsConfig) -> list[str]:
    """Agents of steps that are neither defined nor found on this host's PATH."""
    names = {s.agent for c in cfg.chains.values() for s in c.steps}
    return sorted(
        n for n in names if n not in cfg.agents and "/" not in n and find_program(n) is None
    )


def _places(cfg: ChainsConfig) -> list[tuple[str, SandboxSettings]]:
    top = cfg.sandbox or SandboxSettings()
    places = [("sandbox", top)]
    places += [(f"chains.{n}.sandbox", top.merged(c.sandbox)) for n, c in cfg.chains.items()]
    places += [(f"agents.{n}.sandbox", top.merged(a.sandbox)) for n, a in cfg.agents.items()]
    return places


def _step_places(cfg: ChainsConfig) -> list[tuple[str, SandboxSettings]]:
    """Each chain step's settings as a run merges them: the top level's, the chain's, the
    agent's."""
    top = cfg.sandbox or SandboxSettings()
    places = []
    for name, chain in cfg.chains.items():
        for i, step in enumerate(chain.steps):
            agent = cfg.agents.get(step.agent)
            merged = top.merged(chain.sandbox).merged(agent.sandbox if agent else None)
            places.append((f"chains.{name}.steps[{i}] ({step.agent})", merged))
    return places


def sandbox_secret_problems(cfg: ChainsConfig, top: Path) -> list[str]:
    """Secrets, `deny` and `caCerts` checked on this machine wherever settings are merged; a
    problem the top level's settings carry into every place is named once, at the first."""
    problems: dict[str, str] = {}
    for where, settings in [*_places(cfg), *_step_places(cfg)]:
        for problem in secret_problems(settings, where, top, os.environ):
            problems.setdefault(problem.removeprefix(where), problem)
    return list(problems.values())


def _repo_top(workdir: Path) -> Path:
    """What secret files and `caCerts` are relative to: the repository's top (else the
    project directory)."""
    return git_toplevel(workdir) or workdir


def static_sandbox_problems(cfg: ChainsConfig) -> list[str]:
    """What is wrong in the sandbox settings, without asking Docker."""
    problems = []
    for where, settings in _places(cfg):
        try:
            check_static(settings, where)
        except FksError as exc:
            problems.append(str(exc))
    return problems


def check_sandbox_settings(cfg: ChainsConfig, path: Path) -> bool:
    """Every sandbox setting in the file, as a run would check it. False: Docker not reachable."""
    places = _places(cfg)
    for where, settings in places:
        check_static(settings, f"{path}: {where}")
    client = _docker()
    if client is None:
        return False
    for where, settings in places:
        check_engine(client, settings, f"{path}: {where}")
    return True


def _docker() -> docker.DockerClient | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception:
        return None
    return client
