"""`fks chains`: the chains in the config."""

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import ConfigOption, CwdOption


@handled
def chains_cmd(cwd: CwdOption = None, config: ConfigOption = None) -> int:
    from sandbox_runner.commands import chains

    return chains.run(cwd=cwd, config=config)


def register(app: typer.Typer) -> None:
    app.command("chains", help="List the chains in the config with their descriptions.")(chains_cmd)
