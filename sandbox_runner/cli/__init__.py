"""The `fks` command line. One module per module of `sandbox_runner.commands` parses that
verb's options, builds the command's options object and calls the command; `app.py` assembles
the typer app (`sandbox_runner.cli.app.app`) and holds `main`, the console script.

Nothing heavy is imported at start (no docker, no git, no pydantic): `fks --help` must start
fast, so each verb imports its command module only when it runs. No layer of the package
imports the CLI.
"""

from sandbox_runner.cli.app import main

__all__ = ["main"]
