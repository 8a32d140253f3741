"""`fks validate`: load and check the config."""

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import ConfigOption, CwdOption


@handled
def validate_cmd(cwd: CwdOption = None, config: ConfigOption = None) -> int:
    from sandbox_runner.commands import validate

    return validate.run(cwd=cwd, config=config)


def register(app: typer.Typer) -> None:
    app.command(
        "validate",
        help="Load and check the config (`notify` URLs included: read and parsed); exit 2 on problems.",
    )(validate_cmd)
