"""`fks clean`: remove what dead runs left."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption


@handled
def clean_cmd(
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than", metavar="DAYS", help="Also delete run records older than DAYS."
        ),
    ] = None,
    branches: Annotated[
        bool,
        typer.Option(
            "--branches",
            help="Also delete step and forge task branches whose work landed on their base or "
            "that hold no commit of their own.",
        ),
    ] = False,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Clean up after dead runs of every repository, not only this one."
        ),
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import clean

    options = clean.CleanOptions(older_than=older_than, branches=branches, every=every, cwd=cwd)
    return clean.run(options)


def register(app: typer.Typer) -> None:
    app.command(
        "clean",
        help="Remove what dead runs of this repository left, on every engine they used: containers, services and workspaces (their work saved to their branches first), and the workspace kept between runs (sandbox.keepWorkspace) if no run holds it; optionally branches and records.",
    )(clean_cmd)
