"""`fks schema`: the JSON Schema of the config."""

import typer

from sandbox_runner.cli.common import handled


@handled
def schema_cmd() -> int:
    from sandbox_runner.commands import schema

    return schema.run()


def register(app: typer.Typer) -> None:
    app.command("schema", help="Print the JSON Schema of forge/chains.json (for editors).")(
        schema_cmd
    )
