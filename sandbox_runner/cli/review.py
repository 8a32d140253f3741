"""`fks review`: each step's branch of a run."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption
from sandbox_runner.cli.runs import RunArgument


@handled
def review_cmd(
    run_id: RunArgument = "last",
    diff: Annotated[bool, typer.Option("--diff", help="Print the full diff of each step.")] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import review

    return review.run(run_ref=run_id, diff=diff, cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "review", help="Show each step's branch of a run: commits, diffstat, merged or not."
    )(review_cmd)
