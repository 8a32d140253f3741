"""`forge-tasks` / `fks tasks` command line (placeholder until the task database lands)."""

from __future__ import annotations

import typer

app = typer.Typer(help="The forge-tasks task database.", no_args_is_help=True)


def main() -> None:
    app(prog_name="forge-tasks")
