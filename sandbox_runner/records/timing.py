"""How long a run (or a step of it) actually ran: the time between its start and its end,
less the pauses between its sessions (from where one stopped to the `--resume` that went on)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sandbox_runner.results.reported import RecordModel


class Pause(RecordModel):
    """A time the run was not running: from the end of one session to the next one's start."""

    start: datetime
    end: datetime


def running_seconds(pauses: Sequence[Pause], start: datetime, end: datetime) -> float:
    """Seconds from `start` to `end` the run was running (its pauses left out)."""
    total = (end - start).total_seconds()
    for pause in pauses:
        overlap = (min(end, pause.end) - max(start, pause.start)).total_seconds()
        total -= max(overlap, 0.0)
    return max(total, 0.0)


def session_end(ended: datetime | None, started: datetime, moments: Iterable[datetime]) -> datetime:
    """When the session that is being resumed stopped: when it ended, or, for one whose
    process died without saying so, the last moment its record holds."""
    if ended is not None:
        return ended
    return max([started, *moments])
