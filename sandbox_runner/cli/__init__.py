"""The `fks` command line."""

from sandbox_runner.cli.app import main

__all__ = ["main"]
