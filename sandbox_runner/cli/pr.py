"""`fks pr`: typer options for `commands/pr.py`."""

from __future__ import annotations

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption
from sandbox_runner.cli.runs import RunArgument


@handled
def pr_cmd(run_id: RunArgument = "last", cwd: CwdOption = None) -> int:
    from sandbox_runner.commands.pr import pr

    return pr(run_ref=run_id, cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "pr",
        help="Push a `--pr` run's landed branch and open its GitHub pull request, or update "
        "the open one (again after a failure). RUN is an id, an id prefix or `last`. "
        "Exit codes: 0 open, 1 it failed (one line says why), 2 usage/config error.",
    )(pr_cmd)
