"""What one iteration starts: the agent's command as its CLI's adapter builds it (with what is
left of the budget, the settings files it needs in a directory of fks's own), and the monitor
that reads its output."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.steps.guards import Budget, Guard, Killable
from sandbox_runner.steps.marker import Monitor, PlainMonitor, StreamJsonMonitor


@dataclass(frozen=True)
class Asked:
    """What the step asks of each iteration besides its agent."""

    args: Sequence[str]
    prompt: str | None
    env: Mapping[str, str]
    timeout: float | None
    labels: Mapping[str, str]
    schema: str | None = None
    """The JSON Schema the answer must fit, for a CLI that has a way to ask for one."""


def iteration_spec(
    agent: AgentCommand,
    asked: Asked,
    budget: Budget | None,
    home: Path | None,
    *,
    carried: bool = False,
) -> ExecSpec:
    """What the iteration runs: the agent's command (with what is left of the budget), its
    CLI's settings files written under `home`, or, `carried` (`home` is in a sandbox apart
    from here, whose agent sees only `asked.env`), sent with the spec."""
    environ = dict(asked.env) if carried else {**os.environ, **asked.env}
    launch = agent.launch(asked.args, asked.prompt, environ, home, asked.schema)
    files: dict[str, str] = {}
    if home is not None and carried:
        files = {str(home / name): text for name, text in launch.files.items()}
    elif home is not None:
        write_files(home, launch.files)
    argv = launch.argv
    if budget is not None and agent.stream_json:
        argv += budget.claude_flag()
    env = {**asked.env, **launch.env}
    return ExecSpec(
        tuple(argv),
        cwd=agent.cwd,
        env=env,
        timeout=asked.timeout,
        labels=asked.labels,
        files=files,
        max_cost=budget.left if budget is not None else None,
    )


def cli_home(
    agent: AgentCommand, placed: Path | None = None
) -> contextlib.AbstractContextManager[Path | None]:
    """A directory of fks's own for one iteration of a CLI that reads settings files (Claude
    reads none of fks's): `placed`, the sandbox's, else a temporary one here."""
    if agent.kind != "cli":
        return contextlib.nullcontext()
    if placed is not None:
        return contextlib.nullcontext(placed)
    return _temporary_home()


@contextlib.contextmanager
def _temporary_home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fks-cli-") as name:
        yield Path(name)


def write_files(home: Path, files: Mapping[str, str]) -> None:
    """A CLI's settings files, by their paths under `home` (a directory of fks's own)."""
    for name, text in files.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text, encoding="utf-8")


def monitor_for(agent: AgentCommand) -> Monitor:
    """The monitor of the agent's output: its CLI's stream parser, or the plain marker scan."""
    cli = agent.cli
    return StreamJsonMonitor(cli.parser(agent.model)) if cli is not None else PlainMonitor()


def monitor_cost(monitor: Monitor) -> float | None:
    """What the monitor's stream shows spent so far (None: nothing known)."""
    return monitor.running_cost if isinstance(monitor, StreamJsonMonitor) else None


def monitor_progress(monitor: Monitor) -> tuple[int, bool]:
    """The turns the monitor's stream shows begun (0: it shows none), and whether it shows a
    CLI waiting, without end, for an API it cannot reach."""
    if isinstance(monitor, StreamJsonMonitor):
        return monitor.turns, monitor.unreachable
    return 0, False


def iteration_guard(
    execution: Killable, agent: AgentCommand, budget: Budget | None, stall_after: float | None
) -> Guard:
    """The guard of one iteration: its budget, its stall watch, and the turn limit of a CLI
    that has none of its own."""
    counted = agent.cli is not None and agent.cli.fks_counts_turns
    return Guard(
        execution,
        budget=budget,
        stall_after=stall_after if stall_after and stall_after > 0 else None,
        max_turns=agent.max_turns if counted else None,
    )
