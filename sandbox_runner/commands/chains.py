"""`fks chains`: list the configured chains."""

from __future__ import annotations

from pathlib import Path

from sandbox_runner.errors import EXIT_COMPLETE
from sandbox_runner.paths import project_dir
from sandbox_runner.plan.config import config_path, load_config


def _describe_steps(steps: list[tuple[str, int | None]]) -> str:
    return " -> ".join(agent if n is None else f"{agent}:{n}" for agent, n in steps)


def run(*, cwd: Path | None, config: Path | None) -> int:
    workdir = project_dir(cwd, config=config)
    path = config_path(workdir, config)
    cfg = load_config(path, cwd=workdir, required=True, needed_by="fks chains")
    assert cfg is not None
    if not cfg.chains:
        print(f"No chains defined in {path}.")
        return EXIT_COMPLETE
    width = max(len(name) for name in cfg.chains)
    for name, chain in cfg.chains.items():
        steps = _describe_steps([(s.agent, s.iterations) for s in chain.steps])
        description = chain.description or ""
        print(f"{name:<{width}}  {description}".rstrip())
        print(f"{'':<{width}}    {steps}")
    return EXIT_COMPLETE
