"""The `fks` command line. One module per module of `sandbox_runner.commands` parses that
verb's options, builds the command's options object and calls the command; `app.py` assembles
the typer app (`sandbox_runner.cli.app.app`) and holds `main`, the console script; `options.py`
is the option vocabulary `fks` and `forge-tasks` share.

Nothing heavy is imported at start (no docker, no git, no pydantic): `fks --help` must start
fast, so each verb imports its command module only when it runs (importing every command at
start takes `fks --help` from about 0.2 s to 0.8 s of CPU). Importing this package loads
no verb either (`main` does), so `forge-tasks` (`tasks/cli.py`, the one other command line)
reads `options.py` without `fks`'s app. No other layer of the package imports the CLI.
"""


def main() -> None:
    """The `fks` console script."""
    from sandbox_runner.cli.app import main as fks_main

    fks_main()


__all__ = ["main"]
