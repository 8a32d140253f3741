"""What an iteration reported beside its exit code, in the run record and in its result alike:
what Claude said about its run, and the requests it made through the egress proxy.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RecordModel(BaseModel):
    """The base of the run record's models."""

    # Built on first use: `fks --help` and dry runs never pay for these schemas.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ClaudeStats(RecordModel):
    """What the agent CLI (Claude Code, Codex, Gemini CLI, OpenCode) reported for one iteration."""

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


class RequestsRecord(RecordModel):
    """Requests of one kind made through the egress proxy: to one destination, with one method,
    answered alike."""

    host: str
    """As the agent named it (hostile text: shown only neutralised)."""
    port: int | None = None
    method: str
    status: int | None = None
    """The HTTP status the agent got (None: it got none)."""
    result: str
    """Squid's result: TCP_TUNNEL (HTTPS passed through), TCP_MISS (HTTP forwarded),
    TCP_DENIED (refused), …"""
    secret: str | None = None
    """The destination whose secret the proxy added to them ("model API": the API's
    credential); None: none was added."""
    count: int
    sent: int = 0
    """Bytes from the agent, summed."""
    received: int = 0
    """Bytes to the agent, summed."""


class NetworkRecord(RecordModel):
    """Every request an iteration made through the egress proxy, allowed or refused: the kinds
    made most (at most 50), and the rest summed up."""

    requests: list[RequestsRecord] = Field(default_factory=list)
    more: int = 0
    """Requests of kinds not listed."""
    more_sent: int = 0
    more_received: int = 0

    @property
    def total(self) -> int:
        return self.more + sum(r.count for r in self.requests)
