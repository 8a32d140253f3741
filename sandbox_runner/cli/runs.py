"""`fks show`: one recorded run, step by step."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import CwdOption, handled

RunArgument = Annotated[str, typer.Argument(metavar="RUN")]
"""A run id, an id prefix or `last` (`fks show`, `fks logs`, `fks review`)."""


@handled
def show_cmd(run_id: RunArgument = "last", cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import runs

    return runs.show(run_ref=run_id, cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "show", help="Show a run's steps and iterations. RUN is an id, an id prefix or `last`."
    )(show_cmd)
