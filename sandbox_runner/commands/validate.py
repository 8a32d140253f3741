"""`fks validate`: load the config and check everything that can be checked without running."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.errors import EXIT_COMPLETE, ConfigError
from sandbox_runner.paths import project_dir
from sandbox_runner.plan.config import (
    ForgeConfig,
    SandboxSettings,
    config_path,
    load_config,
    missing_vars,
)

if TYPE_CHECKING:
    import docker


def run(*, cwd: Path | None, config: Path | None) -> int:
    workdir = project_dir(cwd)
    path = config_path(workdir, config)
    cfg = load_config(path, cwd=workdir, required=True, needed_by="fks validate")
    assert cfg is not None
    for name, chain in cfg.chains.items():
        for i, step in enumerate(chain.steps):
            if step.agent not in cfg.agents and missing_vars([step.agent], {}):
                raise ConfigError(
                    f"{path}: chains.{name}.steps[{i}].agent: variables are not allowed in agent names"
                )
    needs = {
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
    engine = check_sandbox_settings(cfg, path)
    print(f"{path}: OK ({len(cfg.agents)} agents, {len(cfg.chains)} chains)")
    if not engine:
        print("  (no Docker engine answered: sandbox CPU limits not checked)")
    for name, variables in needs.items():
        if variables:
            print(f"  chain '{name}' needs: {', '.join(variables)}")
    return EXIT_COMPLETE


def check_sandbox_settings(cfg: ForgeConfig, path: Path) -> bool:
    """Every sandbox setting in the file, as a run would check it. False: Docker not reachable."""
    from sandbox_runner.backends.docker.checks import check_engine, check_static

    top = cfg.sandbox or SandboxSettings()
    places = [("sandbox", top)]
    places += [(f"chains.{n}.sandbox", top.merged(c.sandbox)) for n, c in cfg.chains.items()]
    places += [(f"agents.{n}.sandbox", top.merged(a.sandbox)) for n, a in cfg.agents.items()]
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
