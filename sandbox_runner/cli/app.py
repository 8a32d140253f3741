"""The `fks` typer app: every verb's module adds its commands; `main` maps what escapes to exit
codes."""

import os
import sys
import tempfile
import traceback
from typing import Annotated

import typer

from sandbox_runner import __version__
from sandbox_runner.cli import (
    chains,
    clean,
    forge,
    image,
    init,
    listing,
    logs,
    pr,
    review,
    run,
    runs,
    schema,
    ui,
    validate,
)
from sandbox_runner.console.pipes import tolerate_closed_pipes
from sandbox_runner.errors import EXIT_INTERRUPTED, Interrupted
from sandbox_runner.programs import drop_relative_path

app = typer.Typer(
    name="fks",
    help=(
        "Run coding agents unattended: in loops until they print FORKHESTRA_COMPLETE, "
        "in chains of steps, optionally each step in disposable Docker containers on "
        "a branch and workspace of its own."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        print(f"fks {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version_callback,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """fks: loops and chains of coding agents."""


def _tasks_cmd(ctx: typer.Context) -> None:
    # Loaded only when used: every other command starts faster without it.
    from sandbox_runner.tasks.cli import app as tasks_app

    tasks_app(args=list(ctx.args), prog_name="fks tasks")


# `fks --help` lists the commands in the order they are added, then the groups (image, forge).
image.register(app)
run.register(app)
chains.register(app)
validate.register(app)
init.register(app)
listing.register(app)
runs.register(app)
logs.register(app)
review.register(app)
pr.register(app)
clean.register(app)
app.command(
    "tasks",
    help="The forge-tasks task database (same as `forge-tasks`; see `fks tasks --help`).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)(_tasks_cmd)
forge.register(app)
schema.register(app)
ui.register(app)


def main() -> None:
    tolerate_closed_pipes()
    drop_relative_path()  # fks works in repositories: `.` on PATH would run what they hold
    argv = run.split_agent_args(sys.argv[1:])
    try:
        app(args=argv, prog_name="fks")
    except SystemExit:
        raise
    except (Interrupted, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # an fks bug: keep the screen readable, keep the details
        fd, path = tempfile.mkstemp(prefix="fks-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as crash:
            traceback.print_exc(file=crash)
        print(
            f"fks: internal error: {type(exc).__name__}: {exc} (traceback in {path})",
            file=sys.stderr,
        )
        sys.exit(3)
