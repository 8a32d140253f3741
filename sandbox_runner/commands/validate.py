"""`fks validate`: load the config and check everything that can be checked without running."""

from __future__ import annotations

from pathlib import Path

from sandbox_runner.config import config_path, load_config, missing_vars
from sandbox_runner.errors import EXIT_COMPLETE, ConfigError
from sandbox_runner.paths import project_dir


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
    print(f"{path}: OK ({len(cfg.agents)} agents, {len(cfg.chains)} chains)")
    for name, variables in needs.items():
        if variables:
            print(f"  chain '{name}' needs: {', '.join(variables)}")
    return EXIT_COMPLETE
