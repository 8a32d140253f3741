"""A chain ready to run: the options a run was asked with, turned into its plan and config
(`fks run` and `fks run --resume` plan the same way).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.errors import ConfigError, UsageError
from sandbox_runner.plan.checks import check_dsl_agents, did_you_mean
from sandbox_runner.plan.config import (
    ChainPlan,
    ChainsConfig,
    config_path,
    load_config,
    missing_vars,
    substitute,
)
from sandbox_runner.plan.dsl import Step, parse_dsl
from sandbox_runner.plan.sandbox import SandboxSettings, merge_sandbox_settings

if TYPE_CHECKING:
    from sandbox_runner.records.record import RunOptions


@dataclass
class Planned:
    """A chain ready to run: the plan, the config, and the options it was asked with."""

    plan: ChainPlan
    config: ChainsConfig | None
    options: RunOptions
    cwd: Path
    config_file: Path
    no_progress_limit: int | None = None
    """--no-progress-limit: over the chain's and the config's `noProgressLimit`."""
    cli_prompt: str | None = None
    """--prompt with `${VAR}` substituted."""

    @property
    def agents(self) -> dict[str, Any]:
        return dict(self.config.agents) if self.config else {}

    def sandbox_settings(self) -> SandboxSettings:
        """The config's top-level settings, then the chain's, then --image, --engine,
        --runtime, --allow."""
        return merge_sandbox_settings(
            self.config.sandbox if self.config is not None else None,
            self.plan.sandbox,
            image=self.options.image,
            engine=self.options.engine,
            runtime=self.options.runtime,
            allow=self.options.allow,
        )


def plan_run(options: RunOptions, workdir: Path) -> Planned:
    """Load the config and build the chain plan from the options."""
    config_file = config_path(workdir, Path(options.config) if options.config else None)
    cfg = load_config(
        config_file,
        cwd=workdir,
        required=options.chain is not None,
        agents_of=[options.chain] if options.chain else (),
    )
    if options.chain is not None:
        assert cfg is not None
        shown = (
            os.path.relpath(config_file, workdir)
            if config_file.is_relative_to(workdir)
            else str(config_file)
        )
        plan = chain_plan(cfg, options.chain, options.variables, shown=shown)
    else:
        plan = ChainPlan(parse_dsl(options.dsl or ""))
        check_dsl_agents((s.agent for s in plan.steps), cfg.agents if cfg else {})
    return Planned(
        plan=plan,
        config=cfg,
        options=options,
        cwd=workdir,
        config_file=config_file,
        cli_prompt=_cli_prompt(options.prompt, options.variables),
    )


def _cli_prompt(prompt: str | None, variables: Mapping[str, str]) -> str | None:
    """--prompt with `${VAR}` substituted, as in the config's prompts."""
    missing = missing_vars([prompt], variables)
    if missing:
        pairs = " ".join(f"{m}=…" for m in missing)
        raise UsageError(
            f"--prompt needs variable(s) not provided: {', '.join(missing)} (pass {pairs})"
        )
    return substitute(prompt, variables)


def chain_plan(
    config: ChainsConfig, name: str, variables: Mapping[str, str], *, shown: str
) -> ChainPlan:
    """Look up chain `name`, substitute variables (all missing ones reported at once)."""
    chain = config.chains.get(name)
    if chain is None:
        available = ", ".join(sorted(config.chains)) or "none defined"
        raise ConfigError(
            f"Chain '{name}' not found in {shown}{did_you_mean(name, config.chains)}; "
            f"available chains: {available}"
        )
    texts: list[str | None] = [chain.prompt, chain.prompt_file]
    for step in chain.steps:
        texts += [*step.args, step.prompt, step.prompt_file]
    missing = missing_vars(texts, variables)
    if missing:
        pairs = " ".join(f"{m}=…" for m in missing)
        raise UsageError(
            f"Chain '{name}' needs variable(s) not provided: {', '.join(missing)} (pass {pairs})"
        )
    steps = [
        Step(
            agent=s.agent,
            iterations=s.iterations or 1,
            loop=s.iterations is not None,
            args=tuple(substitute(a, variables) or "" for a in s.args),
            prompt=substitute(s.prompt, variables),
            prompt_file=substitute(s.prompt_file, variables),
        )
        for s in chain.steps
    ]
    return ChainPlan(
        steps,
        name=name,
        prompt=substitute(chain.prompt, variables),
        prompt_file=substitute(chain.prompt_file, variables),
        sandbox=chain.sandbox,
        no_progress_limit=chain.no_progress_limit,
    )
