"""`fks ui`: the run records, step branches and forge backlog in a browser."""

from pathlib import Path
from typing import Annotated

import typer

from sandbox_runner.cli.common import handled


@handled
def ui_cmd(
    port: Annotated[
        int,
        typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (default: any free one)."),
    ] = 0,
    open_browser: Annotated[
        bool,
        typer.Option(
            "--open", help="Open the page in your browser (the token stays off its command line)."
        ),
    ] = False,
    every: Annotated[
        bool, typer.Option("--all", help="Every repository with fks records on this machine.")
    ] = False,
    cwd: Annotated[
        Path | None, typer.Option("--cwd", help="The repository (default: the current one).")
    ] = None,
) -> int:
    from sandbox_runner.commands import ui

    return ui.run(port=port, open_browser=open_browser, every=every, cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "ui",
        help=(
            "Serve the runs, their steps and diffs, and the forge board as a local web page "
            "that updates live (127.0.0.1 only; the printed URL carries its access token) "
            "until Ctrl-C. Needs fks[ui]."
        ),
    )(ui_cmd)
