"""Every agent CLI fks runs first-class, by its `cli` name: adding one is a module and a line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_runner.agentclis.api import AgentCli
from sandbox_runner.agentclis.claude import Claude
from sandbox_runner.agentclis.codex import Codex
from sandbox_runner.agentclis.gemini import Gemini
from sandbox_runner.agentclis.opencode import OpenCode

CLIS: dict[str, AgentCli] = {cli.name: cli for cli in (Claude(), Codex(), Gemini(), OpenCode())}
CLAUDE = CLIS["claude"]


def agent_cli(name: str) -> AgentCli:
    """The adapter of `name` (a value the config checked: KeyError otherwise)."""
    return CLIS[name]


def opening(event: Mapping[str, Any]) -> AgentCli | None:
    """The CLI whose stream `event` begins, if one's does."""
    return next((cli for cli in CLIS.values() if cli.opens(event)), None)


KEY_VARS: tuple[str, ...] = tuple(dict.fromkeys(v for cli in CLIS.values() for v in cli.key_vars))
"""The variables that authenticate any of the CLIs: their values are masked wherever output
is kept or shown."""
