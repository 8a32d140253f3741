"""The agents `fks forge`'s stages run: Claude by default, or the agent of any CLI that
`forge.agents` names for a stage, each with the stage's system prompt and model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sandbox_runner.forge import prompts
from sandbox_runner.plan.agents import CLAUDE
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.forge_settings import ForgeSettings

DEFAULT_MAX_TURNS = 100


def stage_agents(
    s: ForgeSettings, config_agents: Mapping[str, AgentConfig], project: Path
) -> dict[str, AgentConfig]:
    """The forge agents as agent configs (Implement twice: by complexity): Claude, or the
    agent `forge.agents` names for the stage (of `config_agents`), with the stage's system
    prompt (`project`'s own, if it has one)."""
    turns = s.max_turns or DEFAULT_MAX_TURNS
    named = s.agents.named()
    agents = {
        "analyze": ("analyze", s.models.triage_deep),
        "architect": ("architect", s.models.triage_deep),
        "implement": ("implement", s.models.default),
        "implement-complex": ("implement", s.models.complex),
        "review": ("review", s.models.default),
    }
    made = {}
    for name, (stage, model) in agents.items():
        own = config_agents[named[stage]] if stage in named else AgentConfig()
        made[f"forge:{name}"] = AgentConfig(
            path=own.path,
            cli=own.cli,
            systemPromptText=prompts.system_prompt(stage, s, project),
            model=own.model or model,
            args=own.args,
            maxTurns=own.max_turns or turns,
            sandbox=own.sandbox,
        )
    return made


def tools(settings: ForgeSettings, stage: str, agent: AgentConfig) -> list[str]:
    """Claude's tools for the stage (other CLIs take none: their stages have every tool)."""
    if agent.cli not in (None, CLAUDE):
        return []
    chosen = settings.worker_tools if stage == "implement" else settings.triage_tools
    return ["--tools", ",".join(chosen)]
