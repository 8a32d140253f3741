"""Turn a step's agent (a name, a path, `…/.claude/agents/<name>`, or a config entry) into the
command that runs it.

Four kinds:
- `binary`: an executable on PATH or at a path; step args and the prompt are appended.
- `claude-agent`: `…/.claude/agents/<name>` → `claude --agent <name> -p …` in that project.
- `claude`: a config agent with a system prompt → `claude -p <prompt> … --append-system-prompt`.
- `cli`: a config agent whose `cli` names another agent CLI (codex, gemini, opencode): its
  adapter (`agentclis`) builds the headless command.
Both claude kinds run in print mode with stream-json output, and load settings (hooks, MCP
servers, permissions, CLAUDE.md) only from the user's own Claude config and fks's flags, never
from the project they run in: anything in it may have been written by an agent. A
`claude-agent`'s definition is read by fks from the user's checkout and passed with `--agents`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sandbox_runner.agentclis.api import AgentCli, Invocation, Launch
from sandbox_runner.agentclis.claude import SETTING_SOURCES
from sandbox_runner.agentclis.registry import agent_cli
from sandbox_runner.errors import AgentNotFoundError, ConfigError, UsageError
from sandbox_runner.paths import path_kind, read_in_project, shorten
from sandbox_runner.plan.checks import did_you_mean
from sandbox_runner.plan.claude_agents import (
    CLAUDE_AGENTS,
    ClaudeAgentPath,
    agent_definition,
    frontmatter_name,
    parse_claude_agent_path,
)
from sandbox_runner.plan.config import AgentConfig, ChainPlan
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import MODE_AWARENESS, NO_PROMPT_TEXT, PromptSource, resolve_prompt
from sandbox_runner.programs import find_program

AgentKind = Literal["binary", "claude-agent", "claude", "cli"]
CLAUDE = "claude"
DEFAULT_MAX_TURNS = 100


@dataclass(frozen=True)
class AgentCommand:
    """A resolved agent: build its argv for one iteration with `argv(args, prompt)`."""

    name: str
    """The step's agent as written (for messages)."""
    kind: AgentKind
    program: str
    """Executable (absolute path for host binaries, else as given)."""
    cwd: Path
    """Where the agent runs."""
    config: AgentConfig | None = None
    claude_agent: str | None = None
    """For `claude-agent`: the name passed to `--agent`."""
    project: Path | None = None
    """For `claude-agent`: the external project's root."""
    agent_file: Path | None = None
    """For `claude-agent`: its definition in the user's checkout (None: not found)."""
    config_root: Path | None = None
    """Where config-relative files (systemPrompt, mcpConfig, settings) live."""

    @property
    def cli(self) -> AgentCli | None:
        """The adapter of the agent CLI it runs (None: a plain program)."""
        if self.kind == "binary":
            return None
        if self.kind == "cli" and self.config is not None and self.config.cli is not None:
            return agent_cli(self.config.cli)
        return agent_cli(CLAUDE)

    @property
    def model(self) -> str | None:
        """The model the config asks for (None: the CLI's default)."""
        return self.config.model if self.config is not None else None

    @property
    def max_turns(self) -> int | None:
        """The turn limit of an agent CLI fks starts (Claude's `--max-turns`); None: none."""
        if self.kind not in ("claude", "cli") or self.config is None:
            return None
        return self.config.max_turns or DEFAULT_MAX_TURNS

    @property
    def stream_json(self) -> bool:
        """Output is Claude stream-json (completion read from model text only)."""
        return self.kind in ("claude", "claude-agent")

    def argv(self, args: Sequence[str], prompt: str | None) -> list[str]:
        """The full command for one iteration; system prompt files are re-read each time."""
        return self.launch(args, prompt).argv

    def launch(
        self,
        args: Sequence[str],
        prompt: str | None,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
        schema: str | None = None,
    ) -> Launch:
        """The command of one iteration, with the variables and files its CLI needs (written
        under `home`, a directory of the caller's; `environ`: what the agent will see), asking
        for an answer that fits the JSON Schema `schema` where the CLI has a way to."""
        if self.kind == "binary":
            return Launch([self.program, *args, *([prompt] if prompt else [])])
        if self.kind == "claude-agent":
            return Launch(self._claude_agent_argv(args, prompt))
        cli, cfg = self.cli, self.config
        assert cli is not None and cfg is not None
        home = home or Path("~fks-home")
        structured = cli.structured(schema, home) if schema is not None else None
        asked = structured.args if structured is not None else []
        call = Invocation(
            program=self.program,
            prompt=prompt or NO_PROMPT_TEXT,
            system_prompt=self._system_prompt(),
            max_turns=self.max_turns or DEFAULT_MAX_TURNS,
            cwd=self.cwd,
            model=cfg.model,
            args=[
                *(self._config_flags() if self.kind == "claude" else []),
                *cfg.args,
                *args,
                *asked,
            ],
            environ=environ if environ is not None else os.environ,
            home=home,
        )
        launch = cli.launch(call)
        if structured is not None and structured.files:
            launch = replace(launch, files={**launch.files, **structured.files})
        return launch

    def _claude_agent_argv(self, args: Sequence[str], prompt: str | None) -> list[str]:
        # The prompt goes right after -p: the tool flags are variadic and would swallow it.
        argv = [self.program, "--agent", self.claude_agent or ""]
        argv += ["-p", prompt or NO_PROMPT_TEXT, "--output-format", "stream-json", "--verbose"]
        argv += ["--dangerously-skip-permissions", *SETTING_SOURCES]
        if self.agent_file is not None:
            argv += ["--agents", agent_definition(self.agent_file, self.claude_agent or "")]
        argv += ["--append-system-prompt", self._system_prompt()]
        return [*argv, *args]

    def _system_prompt(self) -> str:
        cfg = self.config
        if (
            cfg is None
            or self.kind == "claude-agent"
            or not (cfg.system_prompt or cfg.system_prompt_text)
        ):
            return MODE_AWARENESS.rstrip() + "\n"
        if cfg.system_prompt_text:
            own = cfg.system_prompt_text
        else:
            path = self._config_path(cfg.system_prompt or "")
            try:
                own = read_in_project(Path(path), f"Agent '{self.name}' systemPrompt")
            except OSError as exc:
                raise ConfigError(
                    f"Agent '{self.name}' references systemPrompt '{cfg.system_prompt}' which cannot be read ({exc.strerror})"
                ) from None
        return MODE_AWARENESS + "---\n\n" + own

    def _config_flags(self) -> list[str]:
        cfg = self.config
        assert cfg is not None
        flags: list[str] = []
        if cfg.mcp_config:
            flags += ["--mcp-config", self._config_path(cfg.mcp_config)]
        if cfg.settings:
            flags += ["--settings", self._config_path(cfg.settings)]
        if cfg.allowed_tools:
            flags += ["--allowedTools", ",".join(cfg.allowed_tools)]
        if cfg.disallowed_tools:
            flags += ["--disallowedTools", ",".join(cfg.disallowed_tools)]
        return flags

    def _config_path(self, ref: str) -> str:
        return str((self.config_root or self.cwd) / ref)


def refuse_claude_as_root(command: AgentCommand) -> None:
    """Refuse an agent CLI on the host as root: Claude will not skip its permission prompts
    for root (it exits 1 at once), and fks runs none of the others unattended with full
    permissions as root either, unless IS_SANDBOX=1 says the host itself is a sandbox.
    """
    cli = command.cli
    if cli is None or os.geteuid() != 0 or os.environ.get("IS_SANDBOX") == "1":
        return
    if cli.name != CLAUDE:
        raise UsageError(
            f"Agent '{command.name}' runs {cli.name} unattended with full permissions, which fks "
            "refuses as root; use a normal user, or set IS_SANDBOX=1 if this machine is itself "
            "a disposable sandbox"
        )
    raise UsageError(
        f"Agent '{command.name}' is Claude, which refuses to run unattended as root "
        "(--dangerously-skip-permissions); use --sandbox, or run fks as a normal user, "
        "or set IS_SANDBOX=1 if this machine is itself a disposable sandbox"
    )


def resolve_agent(
    agent: str,
    *,
    agents: dict[str, AgentConfig],
    cwd: Path,
    on_host: bool = True,
    visible: Sequence[Path] = (),
) -> AgentCommand:
    """Resolve a step's agent.

    `on_host=False` resolves for a container: bare names are looked up in the image at start,
    and a path must lie under `cwd`'s workspace or one of the `visible` (mounted) paths.
    """
    cfg = agents.get(agent)
    target = cfg.path if cfg is not None and cfg.path else agent
    if cfg is not None and cfg.is_claude and not (cfg.path and CLAUDE_AGENTS in "/" + cfg.path):
        # `path` names claude's executable only where `cli` says claude (see _claude_program)
        own = cfg.path if cfg.cli == CLAUDE else None
        program = _claude_program(on_host, cwd, own)
        return AgentCommand(
            name=agent, kind="claude", program=program, cwd=cwd, config=cfg, config_root=cwd
        )
    if cfg is not None and cfg.cli_name is not None and cfg.cli_name != CLAUDE:
        program = _cli_program(agent_cli(cfg.cli_name), cfg.path, on_host, cwd)
        return AgentCommand(
            name=agent, kind="cli", program=program, cwd=cwd, config=cfg, config_root=cwd
        )

    external = parse_claude_agent_path(target, cwd)
    if external is not None:
        return _claude_subagent(agent, target, cfg, external, on_host)
    if "/" in target:
        return _agent_at_path(agent, target, cfg, cwd, on_host, visible)
    return _agent_on_path(agent, target, cfg, cwd, on_host, known=list(agents))


def _claude_subagent(
    agent: str,
    target: str,
    cfg: AgentConfig | None,
    external: ClaudeAgentPath,
    on_host: bool,
) -> AgentCommand:
    """A Claude Code subagent defined in another project's `.claude/agents/`."""
    if path_kind(external.project, f"Agent '{shorten(agent)}'", AgentNotFoundError) != "dir":
        raise AgentNotFoundError(
            f"Agent '{agent}': project directory {external.project} does not exist "
            f"(from '{target}'); check the path"
        )
    name = (frontmatter_name(external.file) if external.file else None) or external.name
    return AgentCommand(
        name=agent,
        kind="claude-agent",
        program=_claude_program(on_host, external.project),
        cwd=external.project,
        config=cfg,
        claude_agent=name,
        project=external.project,
        agent_file=external.file,
    )


def _agent_at_path(
    agent: str,
    target: str,
    cfg: AgentConfig | None,
    cwd: Path,
    on_host: bool,
    visible: Sequence[Path],
) -> AgentCommand:
    """An executable named by a path relative to `cwd`."""
    path = Path(os.path.normpath(cwd / target))
    if not on_host and not _is_under(path, [cwd, *visible]):
        raise AgentNotFoundError(
            f"Agent '{agent}': {path} is outside the workspace, so the container cannot see it; "
            "put it in the repository or add its directory to the sandbox 'mounts' option"
        )
    kind = path_kind(path, f"Agent '{shorten(agent)}'", AgentNotFoundError)
    if kind == "missing":
        raise AgentNotFoundError(f"Agent '{agent}' not found: {path} does not exist")
    if kind == "dir" or not os.access(path, os.X_OK):
        raise AgentNotFoundError(
            f"Agent '{agent}': {path} is not an executable file (chmod +x {target}?)"
        )
    return AgentCommand(name=agent, kind="binary", program=str(path), cwd=cwd, config=cfg)


def _agent_on_path(
    agent: str,
    target: str,
    cfg: AgentConfig | None,
    cwd: Path,
    on_host: bool,
    known: Sequence[str] = (),
) -> AgentCommand:
    """A bare program name: looked up on the host's PATH, or in the image at start."""
    if not on_host:
        return AgentCommand(name=agent, kind="binary", program=target, cwd=cwd, config=cfg)
    found = find_program(target)
    if found is None:
        hint = (
            f"not found on PATH{did_you_mean(agent, known)}; is it installed? "
            "(or define it under 'agents' in forge/chains.json)"
            if target == agent
            else f"(path '{target}' from the config) not found on PATH; is it installed?"
        )
        raise AgentNotFoundError(f"Agent '{agent}' {hint}")
    return AgentCommand(name=agent, kind="binary", program=found, cwd=cwd, config=cfg)


def _claude_program(on_host: bool, cwd: Path, path: str | None = None) -> str:
    """claude's executable: `path` (an agent's own, with `cli: claude`), else claude on PATH."""
    if path:
        return _cli_program(agent_cli(CLAUDE), path, on_host, cwd)
    if not on_host:
        return CLAUDE
    found = find_program(CLAUDE, outside=cwd)  # not one a landed commit put on PATH
    if found is None:
        raise AgentNotFoundError(
            "the 'claude' CLI is not on PATH; install it with "
            "'npm install -g @anthropic-ai/claude-code' (or run with --sandbox)"
        )
    return found


def _cli_program(cli: AgentCli, path: str | None, on_host: bool, cwd: Path) -> str:
    """The executable of an agent CLI: the config's `path`, else its name on PATH."""
    target = path or cli.program
    if not on_host:
        return target
    if "/" in target:
        return str(Path(os.path.normpath(cwd / Path(target).expanduser())))
    found = find_program(target, outside=cwd)  # not one a landed commit put on PATH
    if found is None:
        raise AgentNotFoundError(
            f"the '{target}' CLI ({cli.name}) is not on PATH; install it with '{cli.install}'"
        )
    return found


def _is_under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def step_prompt(
    step: Step,
    plan: ChainPlan,
    agents: dict[str, AgentConfig],
    cwd: Path,
    cli_prompt: str | None,
    cli_prompt_file: Path | None,
) -> PromptSource:
    """The prompt source of one step: CLI > step > chain > agent default > none."""
    agent_cfg = agents.get(step.agent)
    return resolve_prompt(
        cwd=cwd,
        cli_prompt=cli_prompt,
        cli_prompt_file=cli_prompt_file,
        levels=[
            ("step", step.prompt, step.prompt_file),
            ("chain", plan.prompt, plan.prompt_file),
            (
                "agent default",
                agent_cfg.default_prompt if agent_cfg else None,
                agent_cfg.default_prompt_file if agent_cfg else None,
            ),
        ],
    )
