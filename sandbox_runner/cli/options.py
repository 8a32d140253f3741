"""The option vocabulary `fks` and `forge-tasks` share: one definition per concept, so a flag
is spelled, explained and checked the same wherever it appears (`--cwd`, `--config`,
`--json`, a task id, the sandbox's options, a new task's fields).

Only typer is imported here: `forge-tasks`, which agents call often, loads this module and
nothing of `fks`'s verbs. No `from __future__ import annotations`: typer evaluates the
annotations once at import (see `common.py`).
"""

from pathlib import Path
from typing import Annotated

import typer

# --- Where and with what: every verb that reads a project ----------------------------------------

CwdOption = Annotated[
    Path | None,
    typer.Option(
        "--cwd",
        metavar="DIR",
        help="Project directory the agents work in (default: the current directory).",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Config file (default: forge/chains.json in <cwd> or the nearest directory above it in the repository).",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON on stdout, for scripts.")
]

# --- The sandbox's options, the same on `fks run` and `fks forge run|retry` --------------------

SandboxOption = Annotated[
    bool,
    typer.Option(
        "--sandbox",
        help="Run every step in Docker containers, on a branch and workspace of its own.",
    ),
]
BaseOption = Annotated[
    str | None,
    typer.Option(
        "--base",
        metavar="BRANCH",
        help="Branch the sandboxed steps start from and merge into (default: the current branch).",
    ),
]
ImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        metavar="IMAGE",
        help="Agent image for --sandbox (default: config, else fks-agent:latest).",
    ),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help=(
            "Docker engine for --sandbox (default: config sandbox.engine, else local): local, "
            "tcp://HOST:PORT, ssh://USER@HOST, context:NAME or swarm."
        ),
    ),
]
RuntimeOption = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        metavar="RUNTIME",
        help=(
            "OCI runtime of the --sandbox containers (default: config sandbox.runtime, else "
            "the engine's, runc): e.g. runsc for gVisor, registered with the engine."
        ),
    ),
]
AllowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        metavar="HOST[:PORT]",
        help="Let --sandbox agents reach HOST (ports 443 and 80, or PORT) for this run; repeatable.",
    ),
]
MaxCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        metavar="USD",
        help="Budget in USD, for any agent CLI: the turn (in a sandbox, the model API call) that"
        " crosses it is the last, nothing more starts.",
    ),
]

# --- Tasks: `fks forge …` and `forge-tasks` ------------------------------------------------------

TaskIdArgument = Annotated[
    str,
    typer.Argument(
        metavar="TASK_ID",
        help="Task id, e.g. TASK-k3f9x2 (the TASK- prefix is optional).",
        show_default=False,
    ),
]

# A new task's fields: `forge-tasks create` and `fks forge create` take the same.
TitleArgument = Annotated[
    str,
    typer.Argument(
        metavar="TITLE", help="One line saying what the task delivers.", show_default=False
    ),
]
DescriptionOption = Annotated[
    str, typer.Option("--description", "-d", metavar="TEXT", help="Why the task exists.")
]
AcOption = Annotated[
    list[str] | None,
    typer.Option(
        "--ac", metavar="TEXT", help="An acceptance criterion (repeatable).", show_default=False
    ),
]
LabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        "-l",
        metavar="LABEL",
        help="A label (repeatable; commas split).",
        show_default=False,
    ),
]
PriorityOption = Annotated[
    str, typer.Option("--priority", "-p", metavar="PRIORITY", help="high, medium or low.")
]
DependsOnOption = Annotated[
    list[str] | None,
    typer.Option(
        "--depends-on",
        metavar="TASK_ID",
        help="Id of a task that must be Done first (repeatable).",
        show_default=False,
    ),
]
StatusOption = Annotated[
    str,
    typer.Option("--status", "-s", metavar="STATUS", help="To Do, In Progress, Done or Blocked."),
]
