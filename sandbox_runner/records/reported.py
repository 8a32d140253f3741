"""What an iteration reported beside its exit code, in the run record and in its result alike:
what Claude said about its run, and the requests the egress proxy refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class RecordModel(BaseModel):
    """The base of the run record's models."""

    # Built on first use: `fks --help` and dry runs never pay for these schemas.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ClaudeStats(RecordModel):
    """What Claude Code reported for one iteration."""

    cost_usd: float | None = None
    """total_cost_usd of the iteration."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    subtype: str | None = None
    """Result subtype: success, error_max_turns, error_during_execution, …"""
    session_id: str | None = None
    duration_ms: int | None = None
    structured_output: dict[str, Any] | None = None
    """The answer of a `--json-schema` run (forge stages), as the model gave it."""


class DeniedRecord(RecordModel):
    """Refused requests to one destination."""

    host: str
    port: int | None = None
    count: int

    def describe(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else self.host
        return f"{self.count} request{'s' if self.count != 1 else ''} to {where}"
