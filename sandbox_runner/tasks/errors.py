"""The one error forge-tasks shows as a single line (`forge-tasks: …`) with exit code 2."""

from __future__ import annotations

from sandbox_runner.errors import FksError


class TaskError(FksError):
    """Bad id, option, status or task file: the message names the problem and the fix."""
