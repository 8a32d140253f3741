"""What the parsers of the other CLIs share: one JSON event a line, read within bounds, with
what every stream keeps (marker, result, session, turns, the tokens and cost seen so far)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sandbox_runner.agentclis.events import LINE_BYTES, Event, Result, Usage, has_marker
from sandbox_runner.bounded import load_json

_STATUS = re.compile(r"(?:status|code)\W{0,3}([45]\d\d)\b", re.IGNORECASE)
"""An HTTP status in a CLI's error message: `unexpected status 401`, `"code":401`."""


class JsonLines:
    """A parser of one JSON event a line; subclasses read each event in `_event`."""

    def __init__(self) -> None:
        self.marker_seen = False
        self.result: Result | None = None
        self.session_id: str | None = None
        self.model: str | None = None
        self.turns = 0
        self.unreachable = False
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost: float | None = None
        self.last_text: str | None = None

    @property
    def running_cost(self) -> float | None:
        return None if self.result is not None else self.cost

    def feed_line(self, line: str) -> list[Event]:
        """Events for one line (see `events_of`)."""
        return events_of(line, self._event)

    def close(self) -> list[Event]:
        return []

    def _event(self, obj: dict[str, Any]) -> list[Event]:
        raise NotImplementedError

    def said(self, text: str) -> None:
        """The model wrote `text` (its own words: only these can hold the marker)."""
        if has_marker(text):
            self.marker_seen = True
        self.last_text = text

    def used(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.cost_usd is not None:
            self.cost = (self.cost or 0.0) + usage.cost_usd

    def ended(self, subtype: str, *, error: str | None = None, status: int | None = None) -> Result:
        """The run's result from what the stream showed; `error`: the CLI's message, `status`:
        the API's answer (else read from the message)."""
        found = _STATUS.search(error) if error and status is None else None
        self.result = Result(
            subtype=subtype,
            is_error=error is not None,
            text=error if error is not None else self.last_text,
            num_turns=self.turns,
            duration_ms=None,
            cost_usd=self.cost,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            session_id=self.session_id,
            api_error_status=int(found.group(1)) if found else status,
        )
        return self.result


def events_of(line: str, event: Callable[[dict[str, Any]], list[Event]]) -> list[Event]:
    """`event`'s events for one stream line; lines that are not JSON objects, or are too large
    or deep to read, or malformed, give none (they stay in the log as they are): a line a
    parser does not understand must not stop the run."""
    try:
        obj = load_json(line, max_bytes=LINE_BYTES)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    try:
        return event(obj)
    except (TypeError, ValueError, AttributeError):
        return []
