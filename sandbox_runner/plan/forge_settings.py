"""The `forge` settings of `forge/chains.json`: the models, agents, tools, limits and system
prompts of `fks forge`'s stages."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictFloat, StrictInt

from sandbox_runner.plan.model import ConfigModel


class ForgeModels(ConfigModel):
    """Which model each `fks forge` stage uses."""

    triage_deep: str = Field(default="sonnet", alias="triageDeep", min_length=1)
    """Analyze and Architect."""
    default: str = Field(default="sonnet", min_length=1)
    """Implement for low/medium complexity, and Review."""
    complex: str = Field(default="opus", min_length=1)
    """Implement for high complexity."""


class ForgePrompts(ConfigModel):
    """System prompt files of the `fks forge` agents (relative to the project; `fks init` writes them)."""

    analyze: str | None = None
    """Default: system-prompts/forge/analyze.md if it exists, else the packaged text."""
    architect: str | None = None
    """Default: system-prompts/forge/architect.md if it exists, else the packaged text."""
    implement: str | None = None
    """Default: system-prompts/forge/implement.md if it exists, else the packaged text."""
    review: str | None = None
    """Default: system-prompts/forge/review.md if it exists, else the packaged text."""


class ForgeAgents(ConfigModel):
    """The agent (a name in `agents`, of any `cli`) each `fks forge` stage runs; unset: Claude."""

    analyze: str | None = None
    architect: str | None = None
    implement: str | None = None
    """Also for high complexity."""
    review: str | None = None

    def named(self) -> dict[str, str]:
        """Stage -> the agent named for it."""
        return {stage: name for stage, name in self.model_dump().items() if name is not None}


class ForgeSettings(ConfigModel):
    """`fks forge`: the analyze → implement → review pipeline over forge-tasks."""

    models: ForgeModels = ForgeModels()
    """Model per stage (an agent named in `agents` uses its own `model`, if it has one)."""
    agents: ForgeAgents = ForgeAgents()
    """The agent of a stage: its `cli`, `model`, `args`, `maxTurns`, `path` and `sandbox`
    apply; the stage's own system prompt replaces its `systemPrompt`. E.g. implement with
    an OpenCode agent, review with Claude."""
    triage_tools: tuple[str, ...] = Field(
        default=("Read", "Glob", "Grep"), alias="triageTools", min_length=1
    )
    """Tools of the read-only agents (Analyze, Architect, Review)."""
    worker_tools: tuple[str, ...] = Field(
        default=("Bash", "Read", "Write", "Edit", "Glob", "Grep"), alias="workerTools", min_length=1
    )
    """Tools of the Implement agent."""
    max_review_retries: StrictInt = Field(default=2, alias="maxReviewRetries", ge=0, le=20)
    """How often a rejected (or conflicting) task goes back to Implement before it is in error."""
    parallel: StrictInt = Field(default=1, gt=0, le=64)
    """Tasks processed at once (`--parallel` overrides)."""
    max_turns: StrictInt | None = Field(default=None, alias="maxTurns", gt=0)
    """Turn limit of every forge agent (default 100)."""
    max_task_cost: StrictFloat | None = Field(
        default=None, alias="maxTaskCost", gt=0, allow_inf_nan=False
    )
    """USD one task may spend across its stages and attempts (`--max-task-cost` overrides);
    a task that reaches it fails, naming what it spent."""
    prompts: ForgePrompts = ForgePrompts()
    """System prompt files."""
    land: Literal["merge", "pr"] = "merge"
    """What becomes of a reviewed task: `merge` into its base here, or `pr`: its branch pushed
    and one GitHub pull request per task (settings: the top-level `pr`)."""
