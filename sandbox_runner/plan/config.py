"""`forge/chains.json`: pydantic models, loading, `${VAR}` substitution and early checks (the
file's JSON is read by `config_file`; `planned` turns a chain of it into a plan).

Every validation problem becomes one `ConfigError` naming the file and the dotted path,
e.g. `forge/chains.json: chains.ralph.steps[1].iterations: must be a positive integer`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from sandbox_runner.agentclis.registry import CLIS
from sandbox_runner.errors import ConfigError, UsageError
from sandbox_runner.paths import CONFIG_FILE, path_kind
from sandbox_runner.plan.checks import (
    did_you_mean,
    problems_error,
    undefined_agents,
    validation_problems,
)
from sandbox_runner.plan.config_file import read_config_json, shown_path
from sandbox_runner.plan.dsl import MAX_ITERATIONS, MAX_STEPS, Step, agent_name_problem
from sandbox_runner.plan.forge_settings import ForgeSettings
from sandbox_runner.plan.model import ConfigModel
from sandbox_runner.plan.notify import NotifyEntry, url_or_entry
from sandbox_runner.plan.pr import PrSettings
from sandbox_runner.plan.sandbox import SandboxSettings

DEFAULT_CONFIG = CONFIG_FILE
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class AgentConfig(ConfigModel):
    """One entry of `agents`: how to run an agent and what to tell it by default."""

    path: str | None = Field(default=None, min_length=1)
    """Binary name, executable path, or `…/.claude/agents/<name>`; overrides the agent's name
    (with `cli`: the CLI's executable)."""
    cli: str | None = None
    """The agent CLI it runs first-class: `claude` (the default for an agent with a system
    prompt), `codex`, `gemini` or `opencode`."""
    default_prompt: str | None = Field(default=None, alias="defaultPrompt")
    """Prompt used when neither the CLI, the step nor the chain gives one."""
    default_prompt_file: str | None = Field(default=None, alias="defaultPromptFile")
    """File holding the default prompt (relative to --cwd)."""
    system_prompt: str | None = Field(default=None, alias="systemPrompt")
    """System prompt file: makes this a Claude agent spawned directly (`claude -p`)."""
    system_prompt_text: str | None = Field(default=None, alias="systemPromptText")
    """Inline system prompt (instead of a file)."""
    mcp_config: str | None = Field(default=None, alias="mcpConfig")
    """MCP config JSON passed as `--mcp-config`."""
    settings: str | None = None
    """Claude settings JSON passed as `--settings`."""
    model: str | None = Field(default=None, min_length=1)
    """Model alias or id (`sonnet`, `opus`, `haiku`, …; for codex `gpt-5`…, for gemini
    `gemini-2.5-pro`…, for opencode `provider/model`, the provider `anthropic` by default)."""
    args: tuple[str, ...] = ()
    """Extra arguments of the agent's CLI, after fks's own (and before the step's)."""
    max_turns: StrictInt | None = Field(default=None, alias="maxTurns", gt=0)
    """Maximum turns per iteration (default 100)."""
    allowed_tools: tuple[str, ...] | None = Field(default=None, alias="allowedTools")
    """Tool whitelist."""
    disallowed_tools: tuple[str, ...] | None = Field(default=None, alias="disallowedTools")
    """Tool blacklist."""
    sandbox: SandboxSettings | None = None
    """Sandbox settings for this agent, over the chain's."""

    @field_validator("sandbox")
    @classmethod
    def _no_engine_per_agent(cls, value: SandboxSettings | None) -> SandboxSettings | None:
        if value is not None and value.engine is not None:
            raise ValueError(
                "engine is chosen for a whole run; set sandbox.engine at the top level or on "
                "the chain"
            )
        return value

    @field_validator("cli")
    @classmethod
    def _known_cli(cls, value: str | None) -> str | None:
        if value is not None and value not in CLIS:
            raise ValueError(f"unknown agent CLI {value!r}; use one of {', '.join(CLIS)}")
        return value

    @model_validator(mode="after")
    def _claude_only_keys(self) -> AgentConfig:
        if self.cli_name in (None, "claude"):
            return self
        keys = [alias for name, alias in _CLAUDE_ONLY if getattr(self, name) is not None]
        if keys:
            raise ValueError(f"{', '.join(keys)}: only for cli 'claude', not {self.cli!r}")
        return self

    @property
    def cli_name(self) -> str | None:
        """The agent CLI it runs first-class (None: a plain program)."""
        if self.cli is not None:
            return self.cli
        return "claude" if self.system_prompt or self.system_prompt_text else None

    @property
    def is_claude(self) -> bool:
        """Spawned directly as `claude -p …` (it has a system prompt, or `cli` says so)."""
        return self.cli_name == "claude"


_CLAUDE_ONLY = (
    ("mcp_config", "mcpConfig"),
    ("settings", "settings"),
    ("allowed_tools", "allowedTools"),
    ("disallowed_tools", "disallowedTools"),
)


class StepConfig(ConfigModel):
    """One step of a chain."""

    agent: str = Field(min_length=1)
    """Agent name (a key of `agents`, a binary on PATH, or a path)."""
    iterations: StrictInt | None = Field(default=None, gt=0, le=MAX_ITERATIONS)
    """Loop up to this many times until the marker; omitted = run once, no marker needed."""
    args: tuple[str, ...] = ()
    """Extra arguments; `${VAR}` is substituted."""
    prompt: str | None = None
    """Prompt for this step."""
    prompt_file: str | None = Field(default=None, alias="promptFile")
    """File holding the prompt for this step."""

    @field_validator("agent")
    @classmethod
    def _agent_name(cls, value: str) -> str:
        problem = agent_name_problem(value)
        if problem:
            raise ValueError(f"{problem}; use a plain name or path")
        return value


class ChainConfig(ConfigModel):
    """A named chain."""

    description: str | None = None
    """Shown by `fks chains`."""
    prompt: str | None = None
    """Prompt for every step without its own."""
    prompt_file: str | None = Field(default=None, alias="promptFile")
    """File holding the chain prompt."""
    steps: tuple[StepConfig, ...] = Field(min_length=1, max_length=MAX_STEPS)
    """The steps, in order."""
    sandbox: SandboxSettings | None = None
    """Sandbox settings for this chain."""
    no_progress_limit: StrictInt | None = Field(default=None, alias="noProgressLimit", ge=0)
    """Stop a looping step after this many iterations without a commit or file change (0: never)."""
    pr: PrSettings | None = None
    """Open a GitHub pull request of this chain's landed branch (over the top-level `pr`)."""


class ChainsConfig(ConfigModel):
    """The whole of forge/chains.json."""

    schema_ref: str | None = Field(default=None, alias="$schema")
    """Where editors find this file's JSON Schema (`fks schema` prints it)."""

    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agent definitions by name."""
    chains: dict[str, ChainConfig] = Field(default_factory=dict)
    """Named chains."""
    sandbox: SandboxSettings | None = None
    """Sandbox settings for every chain and DSL run."""
    no_progress_limit: StrictInt | None = Field(default=None, alias="noProgressLimit", ge=0)
    """Default no-progress limit (3 when unset)."""
    rate_limit_max_wait: StrictFloat | None = Field(
        default=None, alias="rateLimitMaxWait", ge=0, allow_inf_nan=False
    )
    """Seconds to keep backing off from rate-limit/overload answers before giving up (default 900)."""
    stall_timeout: StrictFloat | None = Field(
        default=None, alias="stallTimeout", ge=0, allow_inf_nan=False
    )
    """Seconds an iteration may go without any output before fks stops it as stalled (default
    1200; 0: never)."""
    max_log_bytes: StrictInt | None = Field(default=None, alias="maxLogBytes", gt=0)
    """Bytes of output one iteration's log keeps (default 100 MiB); the rest is dropped and
    counted in the run record. FKS_MAX_LOG_BYTES overrides it."""
    max_run_log_bytes: StrictInt | None = Field(default=None, alias="maxRunLogBytes", gt=0)
    """Bytes of output all of a run's logs keep together (default 1 GiB).
    FKS_MAX_RUN_LOG_BYTES overrides it."""
    forge: ForgeSettings = ForgeSettings()
    """`fks forge` settings."""
    notify: tuple[NotifyEntry, ...] = Field(
        default=(),
        max_length=64,
        json_schema_extra=url_or_entry,
    )
    """Where fks says what happened (a run's end, a forge question or review, a pull request):
    Apprise URLs, or `{url or env, events, level}` entries (see docs/notifications.md)."""
    pr: PrSettings | None = None
    """Open a GitHub pull request of a sandboxed run's landed branch (`fks run --pr`)."""

    @model_validator(mode="after")
    def _forge_agents_defined(self) -> ChainsConfig:
        for stage, name in self.forge.agents.named().items():
            if name not in self.agents:
                hint = did_you_mean(name, self.agents)
                raise ValueError(
                    f"forge.agents.{stage}: no agent {name!r} in agents{hint}; define it there"
                )
        return self

    def every_sandbox(self) -> list[SandboxSettings | None]:
        """The sandbox settings at the top, of every chain and of every agent."""
        chains = [c.sandbox for c in self.chains.values()]
        return [self.sandbox, *chains, *(a.sandbox for a in self.agents.values())]

    @field_validator("agents", "chains")
    @classmethod
    def _names_not_blank(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not name.strip():
                raise ValueError("names must not be empty")
            problem = agent_name_problem(name)
            if problem:
                raise ValueError(f"name {name!r} {problem}")
        return value


# --- loading -------------------------------------------------------------------------------


def config_path(cwd: Path, config: Path | None) -> Path:
    """The config file in use: --config (relative to the current directory) or <cwd>/forge/chains.json."""
    return config.resolve() if config is not None else cwd / DEFAULT_CONFIG


def load_config(
    path: Path,
    *,
    cwd: Path,
    required: bool,
    shown: str | None = None,
    needed_by: str = "--chain",
    agents_of: Collection[str] | Literal["all"] = (),
) -> ChainsConfig | None:
    """Load and check the config; None when the file does not exist and nothing needs it.

    Every problem is reported at once; `agents_of` names the chains (or "all") whose steps
    must not name an agent that looks like a typo of a defined one.
    """
    shown = shown or shown_path(path, cwd)
    raw = read_config_json(path, shown, required=required, needed_by=needed_by)
    if raw is None:
        return None
    problems = undefined_agents(raw, None if agents_of == "all" else agents_of)
    try:
        loaded = ChainsConfig.model_validate(raw)
    except ValidationError as exc:
        raise problems_error(shown, validation_problems(exc, ChainsConfig) + problems) from None
    problems = file_problems(loaded, cwd=cwd, shown=shown) + problems
    if problems:
        raise problems_error(shown, problems)
    return loaded


def file_problems(config: ChainsConfig, *, cwd: Path, shown: str) -> list[str]:
    """Every referenced file (without unresolved ${VAR}) that does not exist."""
    problems = []
    for name, agent in config.agents.items():
        for label, ref in (
            ("systemPrompt", agent.system_prompt),
            ("defaultPromptFile", agent.default_prompt_file),
            ("mcpConfig", agent.mcp_config),
            ("settings", agent.settings),
        ):
            if ref and not _VAR.search(ref) and not _is_file(cwd / ref, shown):
                problems.append(f"Agent '{name}' references {label} '{ref}' which does not exist")
    for chain_name, chain in config.chains.items():
        refs = [("promptFile", chain.prompt_file)]
        refs += [(f"steps[{i}].promptFile", s.prompt_file) for i, s in enumerate(chain.steps)]
        for label, ref in refs:
            if ref and not _VAR.search(ref) and not _is_file(cwd / ref, shown):
                problems.append(
                    f"Chain '{chain_name}' {label} references '{ref}' which does not exist"
                )
    for stage, ref in config.forge.prompts.model_dump().items():
        if ref and not _is_file(cwd / ref, shown):
            problems.append(f"forge.prompts.{stage} references '{ref}' which does not exist")
    return problems


def config_schema() -> dict[str, Any]:
    """The JSON Schema of forge/chains.json (`fks schema`; `fks init` saves it for editors)."""
    data = ChainsConfig.model_json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **data,
        "title": "fks forge/chains.json",
    }


def _is_file(path: Path, shown: str) -> bool:
    return path_kind(path, shown, ConfigError) == "file"


# --- chains and variables --------------------------------------------------------------------


def parse_vars(pairs: Iterable[str]) -> dict[str, str]:
    """`["A=1", "B=x y"]` → `{"A": "1", "B": "x y"}`."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"'{pair}' is not a VAR=value pair (names: letters, digits, _)")
        out[name] = value
    return out


def missing_vars(texts: Iterable[str | None], variables: Mapping[str, str]) -> list[str]:
    """Variables referenced in `texts` and not given, in first-seen order."""
    seen: dict[str, None] = {}
    for text in texts:
        for name in _VAR.findall(text or ""):
            if name not in variables:
                seen[name] = None
    return list(seen)


def substitute(text: str | None, variables: Mapping[str, str]) -> str | None:
    """Replace `${VAR}`; callers check `missing_vars` first."""
    if text is None:
        return None
    return _VAR.sub(lambda m: variables[m.group(1)], text)


class ChainPlan:
    """A chain (from the config or the DSL) with variables substituted: what `run` executes."""

    def __init__(
        self,
        steps: list[Step],
        *,
        name: str | None = None,
        prompt: str | None = None,
        prompt_file: str | None = None,
        sandbox: SandboxSettings | None = None,
        no_progress_limit: int | None = None,
    ) -> None:
        self.steps = steps
        self.name = name
        self.prompt = prompt
        self.prompt_file = prompt_file
        self.sandbox = sandbox
        self.no_progress_limit = no_progress_limit
