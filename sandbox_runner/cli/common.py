"""What several verbs share: error handling with the documented exit codes, and options.

No `from __future__ import annotations` in the CLI's modules on purpose: typer reads every
option's annotation with `get_type_hints`, and evaluating them once at import is ~10 ms
cheaper than compiling postponed strings at every start.
"""

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec

import typer

from sandbox_runner.errors import EXIT_INTERRUPTED, FksError, Interrupted

P = ParamSpec("P")


def handled(fn: Callable[P, int | None]) -> Callable[P, None]:
    """Turn a command's return code and FksError/Ctrl-C into typer exits with documented codes."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = fn(*args, **kwargs)
        except FksError as exc:
            print(f"fks: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except (Interrupted, KeyboardInterrupt):
            print("fks: interrupted", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(code or 0)

    return wrapper


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

# The sandbox's options, the same on `fks run` and `fks forge run|retry`.
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
        help="Budget in USD: a Claude agent stops at the turn that crosses it, nothing more starts.",
    ),
]

# `fks forge …`'s, shared by its pipeline's verbs and its one-task verbs.
TaskArgument = Annotated[str, typer.Argument(metavar="TASK_ID")]
ForgeJsonOption = Annotated[
    bool, typer.Option("--json", help="Print the tasks' results as JSON on stdout.")
]
