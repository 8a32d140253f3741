"""Claude Code agent files (`…/.claude/agents/<name>.md`): where one is, and its definition as
fks passes it with `--agents` (the body its prompt, a few front-matter fields)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_runner.bounded import LimitExceeded, load_yaml
from sandbox_runner.errors import AgentNotFoundError, ConfigError
from sandbox_runner.paths import inside_project, path_kind, shorten

CLAUDE_AGENTS = "/.claude/agents/"
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
    cut = normalised.rfind(CLAUDE_AGENTS)
    if cut < 0:
        return None
    tail = normalised[cut + len(CLAUDE_AGENTS) :]
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
