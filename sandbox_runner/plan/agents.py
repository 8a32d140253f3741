"""Turn a step's agent (a name, a path, `…/.claude/agents/<name>`, or a config entry) into the
command that runs it.

Three kinds:
- `binary`: an executable on PATH or at a path; step args and the prompt are appended.
- `claude-agent`: `…/.claude/agents/<name>` → `claude --agent <name> -p …` in that project.
- `claude`: a config agent with a system prompt → `claude -p <prompt> … --append-system-prompt`.
Both claude kinds run in print mode with stream-json output, and load settings (hooks, MCP
servers, permissions, CLAUDE.md) only from the user's own Claude config and fks's flags, never
from the project they run in: anything in it may have been written by an agent. A
`claude-agent`'s definition is read by fks from the user's checkout and passed with `--agents`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sandbox_runner.bounded import LimitExceeded, load_yaml
from sandbox_runner.errors import AgentNotFoundError, ConfigError, UsageError
from sandbox_runner.paths import inside_project, path_kind, read_in_project, shorten
from sandbox_runner.plan.checks import did_you_mean
from sandbox_runner.plan.config import AgentConfig, ChainPlan
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.prompts import MODE_AWARENESS, NO_PROMPT_TEXT, PromptSource, resolve_prompt
from sandbox_runner.programs import find_program

AgentKind = Literal["binary", "claude-agent", "claude"]
CLAUDE = "claude"
DEFAULT_MAX_TURNS = 100
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")
"""The variables that authenticate Claude Code with the model API: a sandboxed Claude gets
them, and their values are masked wherever output is kept or shown."""
_CLAUDE_AGENTS = "/.claude/agents/"
SETTING_SOURCES = ("--setting-sources", "user")
"""Claude Code loads no project or local settings (`.claude/settings*.json`, `.mcp.json`,
CLAUDE.md, project agents): only the user's, and what fks passes on the command line."""
MAX_AGENT_FILE = 64 * 1024
"""An agent file's size limit: its definition is one argv entry (`--agents`)."""
_AGENT_FIELDS = ("description", "model")
_AGENT_TOOL_FIELDS = ("tools", "disallowedTools")


@dataclass(frozen=True)
class ClaudeAgentPath:
    """`/proj/.claude/agents/reviewer[.md]` split into its project root and agent name."""

    project: Path
    name: str
    file: Path | None


def parse_claude_agent_path(ref: str, base: Path) -> ClaudeAgentPath | None:
    """The project and agent of a `*/.claude/agents/<name>` path (the last such segment wins).

    Raises AgentNotFoundError when the OS refuses to look at the path (e.g. name too long).
    """
    normalised = "/" + ref if ref.startswith(".claude/agents/") else ref
    cut = normalised.rfind(_CLAUDE_AGENTS)
    if cut < 0:
        return None
    tail = normalised[cut + len(_CLAUDE_AGENTS) :]
    if not tail or "/" in tail:
        return None
    project = Path(os.path.normpath(base / (normalised[:cut] or ".")))
    stem = tail.removesuffix(".md")
    file = project / ".claude" / "agents" / f"{stem}.md"
    found = path_kind(file, f"Agent '{shorten(ref)}'", AgentNotFoundError) == "file"
    return ClaudeAgentPath(project=project, name=stem, file=file if found else None)


def agent_definition(file: Path, name: str) -> str:
    """`--agents` JSON defining `name` from its Claude Code agent file: the body is the prompt;
    description, model and tool lists come from the front matter (hooks, MCP servers and
    permission modes there are not taken)."""
    what = f"Agent '{shorten(name)}' file"
    try:
        with inside_project(file, what).open("rb") as handle:
            data = handle.read(MAX_AGENT_FILE + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentNotFoundError(f"{what} {shorten(str(file))} cannot be read ({exc})") from None
    if len(data) > MAX_AGENT_FILE:
        raise ConfigError(
            f"{what} {shorten(str(file))} is over {MAX_AGENT_FILE // 1024} KiB; shorten it"
        )
    header, body = _split_frontmatter(text, f"{what} {shorten(str(file))}")
    fields: dict[str, object] = {"description": name, "prompt": body.strip() or name}
    for key in _AGENT_FIELDS:
        if isinstance(header.get(key), str) and header[key].strip():
            fields[key] = header[key].strip()
    for key in _AGENT_TOOL_FIELDS:
        value = header.get(key)
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list):
            fields[key] = [str(item).strip() for item in items if str(item).strip()]
    return json.dumps({name: fields})


def _split_frontmatter(text: str, what: str) -> tuple[dict[str, Any], str]:
    """A Markdown file's YAML front matter (empty when missing or malformed) and its body;
    ConfigError naming `what` when it is nested too deep or too large to be read."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, ""
    import yaml

    try:
        header = load_yaml(text[3:end], max_bytes=MAX_AGENT_FILE)
    except LimitExceeded as exc:
        raise ConfigError(f"{what}: front matter is {exc}") from None
    except yaml.YAMLError:  # malformed: no front matter
        header = None
    body = text[end + 4 :].split("\n", 1)[1] if "\n" in text[end + 4 :] else ""
    return (header if isinstance(header, dict) else {}), body


def frontmatter_name(file: Path) -> str | None:
    """The `name:` of a Claude Code agent file's front matter: what `claude --agent` selects by."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    header = text[3 : end if end >= 0 else len(text)]
    match = re.search(r"^name:\s*(.+?)\s*$", header, re.MULTILINE)
    if match is None:
        return None
    return match.group(1).strip().strip("'\"") or None


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
    def max_turns(self) -> int | None:
        """The turn limit fks gives Claude Code (`--max-turns`); None: fks gives none."""
        if self.kind != "claude" or self.config is None:
            return None
        return self.config.max_turns or DEFAULT_MAX_TURNS

    @property
    def stream_json(self) -> bool:
        """Output is Claude stream-json (completion read from model text only)."""
        return self.kind != "binary"

    def argv(self, args: Sequence[str], prompt: str | None) -> list[str]:
        """The full command for one iteration; claude system prompt files are re-read each time."""
        if self.kind == "binary":
            return [self.program, *args, *([prompt] if prompt else [])]
        # The prompt goes right after -p: the tool flags are variadic and would swallow it.
        argv = [self.program]
        if self.kind == "claude-agent":
            argv += ["--agent", self.claude_agent or ""]
        argv += ["-p", prompt or NO_PROMPT_TEXT, "--output-format", "stream-json", "--verbose"]
        argv += ["--dangerously-skip-permissions", *SETTING_SOURCES]
        if self.kind == "claude-agent" and self.agent_file is not None:
            argv += ["--agents", agent_definition(self.agent_file, self.claude_agent or "")]
        argv += ["--append-system-prompt", self._system_prompt()]
        if self.kind == "claude":
            argv += self._config_flags()
        return [*argv, *args]

    def _system_prompt(self) -> str:
        cfg = self.config
        if cfg is None or self.kind != "claude":
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
        flags = ["--max-turns", str(self.max_turns)]
        if cfg.model:
            flags += ["--model", cfg.model]
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
    """Refuse a Claude agent on the host as root: the CLI will not skip its permission prompts
    for root (it exits 1 at once), unless IS_SANDBOX=1 says the host itself is a sandbox.
    """
    if command.kind == "binary" or os.geteuid() != 0 or os.environ.get("IS_SANDBOX") == "1":
        return
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
    if cfg is not None and cfg.is_claude and not (cfg.path and _CLAUDE_AGENTS in "/" + cfg.path):
        program = _claude_program(on_host, cwd)
        return AgentCommand(
            name=agent, kind="claude", program=program, cwd=cwd, config=cfg, config_root=cwd
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


def _claude_program(on_host: bool, cwd: Path) -> str:
    if not on_host:
        return CLAUDE
    found = find_program(CLAUDE, outside=cwd)  # not one a landed commit put on PATH
    if found is None:
        raise AgentNotFoundError(
            "the 'claude' CLI is not on PATH; install it with "
            "'npm install -g @anthropic-ai/claude-code' (or run with --sandbox)"
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
