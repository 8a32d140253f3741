"""A running iteration of a step on its workspace (`Exporting`): its output without fks's own
lines, and, once it has ended, what it exported, taken by the step's sandbox (`ExportOwner`).
How the iteration's end is known and how its bundle reaches the host are its runner's and its
workspace's to say (`runners/iteration.py`, `export.ExportChannel`); nothing here asks where
it ran."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from sandbox_runner.backends.api import ExecResult, PhaseName, Stream
from sandbox_runner.backends.docker.runners.iteration import Iteration, PlaceLostError
from sandbox_runner.backends.docker.workspace.export import (
    Export,
    ExportChannel,
    ExportError,
    PreparedLine,
    ReportFilter,
)
from sandbox_runner.errors import AgentNotFoundError

_KEPT = "kept as the last iteration left it"


class ExportOwner(Protocol):
    """Who takes what an iteration exported (`WorkspaceSandbox` does)."""

    scratch: Path
    """A directory of the host's own, for bundles."""

    def collect(self, container_id: str) -> Export:
        """Read a stopped container's export (before it is removed)."""
        ...

    def accept(self, export: Export) -> None: ...

    def refuse(self, why: str) -> None: ...

    def prepared(self, line: PreparedLine) -> None:
        """The container's script prepared the workspace (its line came before the agent)."""
        ...

    def timed(self, name: PhaseName, since: float, detail: str = "") -> None:
        """Phase `name`, begun at `since` (time.monotonic()), has ended."""
        ...

    def place_lost(self, why: str) -> None:
        """The place the iteration ran on went away (see `PlaceLostError`)."""
        ...


class Exporting:
    """A running iteration; reading its exit status also reads what it exported."""

    def __init__(
        self,
        execution: Iteration,
        owner: ExportOwner,
        agent: str,
        nonce: str,
        channel: ExportChannel,
        metered: Callable[[], float | None] | None = None,
    ) -> None:
        """`nonce`: what the script's own lines carry; `channel`: how its bundle comes;
        `metered`: what the egress proxy's meter counted of it so far."""
        self._metered = metered
        self._execution = execution
        self._owner = owner
        self._agent = agent
        self._prepared = PreparedLine(nonce)
        self._report = ReportFilter(nonce)
        self._channel = channel
        self._began = time.monotonic()
        """When the container started: the workspace's checkout ends with the prepared line."""
        self.lost: str | None = None
        """Why the place the iteration ran on is gone, if it is."""

    @property
    def id(self) -> str:
        return self._execution.id

    @property
    def container_id(self) -> str | None:
        return self._execution.container_id

    def kill(self) -> None:
        self._execution.kill()

    def metered_cost(self) -> float | None:
        return self._metered() if self._metered is not None else None

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        settled = False
        try:
            for stream, data in self._execution.chunks():
                if stream == "stderr":
                    data = self._stderr(data)
                    if not settled and self._report.reported() is not None:
                        self._execution.settle()  # the script's closing line: nothing follows
                        settled = True
                if data:
                    yield stream, data
        except PlaceLostError as exc:
            self.lost = str(exc)
        rest = self._prepared.finish()
        rest = self._channel.feed(rest) + self._channel.finish()
        rest = self._report.feed(rest) + self._report.finish()
        if rest:
            yield "stderr", rest

    def _stderr(self, data: bytes) -> bytes:
        """The agent's output without fks's lines: prepared, the channel's and the report."""
        seen = self._prepared.value is not None
        data = self._prepared.feed(data)
        if not seen and self._prepared.value is not None:
            self._owner.prepared(self._prepared)
            kept = self._prepared.value == "kept"
            self._owner.timed("checkout", self._began, _KEPT if kept else "")
        data = self._channel.feed(data)
        return self._report.feed(data)

    def wait(self) -> ExecResult:
        result: ExecResult | None = None
        try:
            result = self._succeeded() or (self._execution.wait() if self.lost is None else None)
        except PlaceLostError as exc:
            self.lost = str(exc)
        if self.lost is not None:
            self._owner.place_lost(self.lost)
            return ExecResult(exit_code=255, container_id=self.container_id)
        assert result is not None
        began = time.monotonic()
        export = self._exported()
        if export.complete:  # the container's own export, then what the host took of it
            self._owner.timed("export", began - export.export_seconds)
        if export.agent_missing and result.exit_code == 127:
            raise AgentNotFoundError(
                f"Agent '{self._agent}' not found in the image (not on its PATH, or "
                "not in the workspace); install it in the image or give a path in the repository"
            )
        return result

    def _succeeded(self) -> ExecResult | None:
        """The script's report, once its output has ended, when it says the agent exited 0
        and its runner takes a report for the end (a container fks did not kill): the
        container is ending, and Docker need not be waited for (its stop takes tens of ms
        more). Anything else - no report, a failure (which may be the memory limit's doing), a
        timeout, an end only the engine knows - is asked of Docker. A report the agent forged
        can claim only the exit it could have chosen itself."""
        reported = self._report.reported()
        if reported is None or reported.first("code") != "0" or not self._execution.report_ends_it:
            return None
        return ExecResult(exit_code=0, container_id=self.container_id)

    def _exported(self) -> Export:
        """What the iteration exported: its report, and the bundle if it made one (carried by
        its channel, else fetched from the stopped container)."""
        try:
            export = self._channel.taken(self._report)
        except ExportError as exc:
            self._owner.refuse(str(exc))
            return Export()
        if export is None:
            return self._owner.collect(self._execution.id)
        self._owner.accept(export)  # nothing to fetch: the report (and channel) is all there is
        return export
