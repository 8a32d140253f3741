"""Expected errors (shown as one line, no traceback) and the exit codes they map to."""

from __future__ import annotations

EXIT_COMPLETE = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class FksError(Exception):
    """An error the user can cause and fix: printed as `fks: <message>`, exit code 2."""

    exit_code: int = EXIT_USAGE


class UsageError(FksError):
    """Bad command-line usage: DSL syntax, conflicting options, bad VAR=value."""


class ConfigError(FksError):
    """forge/chains.json is missing, invalid, or refers to something that does not exist."""


class AgentNotFoundError(FksError):
    """An agent name or path cannot be resolved to something runnable."""


class SandboxError(FksError):
    """The sandbox backend cannot run: Docker missing, daemon down, image missing."""


class WorkspaceError(FksError):
    """The git repository is not in a state a sandboxed run can start from."""


class LockedError(FksError):
    """Another fks run holds the lock for this repository and base branch."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: everything started is stopped, exit code 130.

    A BaseException so that `except Exception` clean-up paths never swallow it.
    """

    exit_code: int = EXIT_INTERRUPTED

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
