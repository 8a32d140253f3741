"""The interface every agent CLI's adapter implements: the headless command of one iteration
(`launch`), a parser of its stream (`parser`), how its transcripts begin (`opens`), and the
names of its credentials and API address for the messages that name a fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox_runner.agentclis.events import Event, Result


@dataclass(frozen=True)
class Invocation:
    """What one iteration asks of a CLI."""

    program: str
    """The CLI's executable (a path on the host, or a name in an image)."""
    prompt: str
    system_prompt: str
    """fks's own instructions and the agent's system prompt, as one text."""
    max_turns: int
    cwd: Path
    model: str | None = None
    args: Sequence[str] = ()
    """Extra arguments: the agent's `args` and the step's, after fks's own."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """The environment the CLI will run in (its keys and base URLs are read from it)."""
    home: Path = Path("~fks-home")
    """A directory of fks's own for this iteration, where the `files` of its `Launch` are
    written (an empty one per iteration)."""


@dataclass(frozen=True)
class Launch:
    """The command of one iteration and the variables it runs with, over the inherited ones."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Settings files the CLI reads, by their path under `Invocation.home`."""


@dataclass(frozen=True)
class Structured:
    """How a CLI is asked for an answer that fits a JSON Schema: its arguments, and the files
    they name (by their paths under `Invocation.home`)."""

    args: list[str]
    files: dict[str, str] = field(default_factory=dict)


class StreamParser(Protocol):
    """Reads a CLI's stream one line at a time into neutral events."""

    marker_seen: bool
    """The marker was a line of the model's own text (never of a tool's output)."""
    result: Result | None
    """How the run ended, once the stream says so."""
    session_id: str | None
    turns: int
    """Turns begun so far (model requests, or tool calls where the stream shows no requests)."""
    unreachable: bool
    """The CLI cannot reach its API and waits for it on its own, without end."""

    @property
    def running_cost(self) -> float | None:
        """What the stream shows spent so far, at least (None: not known)."""
        ...

    def feed_line(self, line: str) -> list[Event]:
        """Events for one line; lines it does not understand give none."""
        ...

    def close(self) -> list[Event]:
        """The stream ended: what is still held (text in pieces, a result the CLI never sent)."""
        ...


class AgentCli(Protocol):
    """One agent CLI."""

    name: str
    """Its `cli` value in the config."""
    title: str
    """Its name for people."""
    program: str
    """The executable's name."""
    install: str
    """How to install it (for the message when it is missing)."""
    key_vars: tuple[str, ...]
    """The variables its users authenticate it with."""
    base_url_var: str
    """The variable that points it at another API address (a gateway, a proxy)."""
    api: str
    """The model API it speaks (`anthropic`, `openai`, `gemini`): in a sandbox, the egress
    proxy's upstream it goes out through."""
    fks_counts_turns: bool
    """The CLI has no turn limit of its own: fks counts turns in its stream and stops it."""

    def launch(self, call: Invocation) -> Launch:
        """The headless command and environment of one iteration."""
        ...

    def parser(self, model: str | None = None) -> StreamParser:
        """A parser for one iteration's stream (`model`: the one asked for, to price usage)."""
        ...

    def opens(self, event: Mapping[str, Any]) -> bool:
        """Whether `event` is the first event of this CLI's stream (a transcript of it)."""
        ...

    def structured(self, schema: str, home: Path) -> Structured | None:
        """How to ask for an answer that fits `schema` (JSON Schema text); None: the CLI has
        no way, so the caller asks for a JSON block in the prompt and validates it."""
        ...
