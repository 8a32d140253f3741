"""`fks init`: scaffold the prompts and the config."""

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption


@handled
def init_cmd(cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import init

    return init.run(cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "init",
        help=(
            "Scaffold ralph/, system-prompts/fk/ and forge/chains.json (never overwrites) at the "
            "top of the git repository (or in --cwd)."
        ),
    )(init_cmd)
