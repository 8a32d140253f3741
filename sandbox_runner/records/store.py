"""Run records under `.forge/runs/<run-id>/`: `run.json` (rewritten atomically as the run goes)
and one raw log file per iteration, written as output arrives.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from sandbox_runner.errors import FksError, UsageError
from sandbox_runner.git.runner import git_toplevel
from sandbox_runner.outcomes import UNCOUNTED, IterationEnd, Reason, Status
from sandbox_runner.paths import slug, write_atomic
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.projects import remember_project
from sandbox_runner.records.record import (
    DeliveryRecord,
    IterationRecord,
    PullRecord,
    RunRecord,
    StepRecord,
    now,
)
from sandbox_runner.records.timing import Pause, session_end
from sandbox_runner.results.reported import (
    DeniedRecord,
    NetworkRecord,
)

if TYPE_CHECKING:
    from sandbox_runner.git.landing import Landing
    from sandbox_runner.results.ended import IterationResult

Ended = Literal[Status.INTERRUPTED, Status.FAILED]
"""How a run ends that did not get to its end: interrupted, or failed on an error (whose text
is its reason)."""
RECORD_BYTES = 64 << 20
"""Bytes of one run.json read at most (a step of 1,000 iterations takes about 1 MiB)."""


def project_root(cwd: Path) -> Path:
    """Where `.forge/` lives: the git work tree's top, else `cwd` itself."""
    return git_toplevel(cwd) or cwd


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class RunStore:
    """All runs of one project."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.layout = ForgeLayout(project)
        self.root = self.layout.runs

    def create(self, record: RunRecord) -> ActiveRun:
        directory = self.root / record.id
        directory.mkdir(parents=True, exist_ok=False)
        run = ActiveRun(directory, record)
        run.save()
        remember_project(self.project)
        return run

    def open(self, record: RunRecord) -> ActiveRun:
        """Continue writing an existing run (resume)."""
        return ActiveRun(self.root / record.id, record)

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "run.json").is_file())

    def load(self, run_id: str) -> RunRecord:
        path = self.root / run_id / "run.json"
        try:
            with path.open("rb") as handle:
                data = handle.read(RECORD_BYTES + 1)
        except FileNotFoundError:
            raise FksError(f"run '{run_id}' has no record at {path}") from None
        except OSError as exc:
            raise FksError(f"{path} cannot be read ({exc.strerror})") from None
        if len(data) > RECORD_BYTES:
            raise FksError(f"{path} is over {RECORD_BYTES >> 20} MiB: not a run record fks wrote")
        try:
            # pydantic's parser has its own bound on nesting (a ValidationError past it).
            return RunRecord.model_validate_json(data)
        except ValidationError as exc:
            raise FksError(f"{path} is not a valid run record ({exc.errors()[0]['msg']})") from None

    def records(self) -> Iterator[RunRecord]:
        for run_id in self.ids():
            try:
                yield self.load(run_id)
            except FksError:
                continue

    def resolve(self, ref: str) -> str:
        """A run id from `last`, a full id or a unique id prefix."""
        ids = self.ids()
        if not ids:
            raise UsageError(f"no runs recorded in {self.root}")
        if ref == "last":  # the newest by start time (ids only have one-second resolution)
            newest = max(self.records(), key=lambda r: (r.started, r.id), default=None)
            return newest.id if newest is not None else ids[-1]
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise UsageError(f"no run matches '{ref}'; see 'fks runs'")
        raise UsageError(
            f"'{ref}' matches {len(matches)} runs ({', '.join(matches[:5])}…); give more of the id"
        )

    def run_dir(self, run_id: str) -> Path:
        return self.layout.run_dir(run_id)

    def discard(self, run_id: str) -> None:
        """Forget a run that never started an iteration."""
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)


class RecordWriter:
    """The one writer of step and iteration records: every change to them is a method here.

    This base keeps them in memory (a step loop without a run); `ActiveRun` saves each change.
    """

    def save(self) -> None:
        """Nothing to save without a run."""

    def begin_step(self, step: StepRecord) -> None:
        step.status = Status.RUNNING
        step.started = step.started or now()
        self.save()

    def finish_step(self, step: StepRecord, *, complete: bool, reason: Reason) -> None:
        step.status = Status.COMPLETE if complete else Status.INCOMPLETE
        step.reason = reason
        step.ended = now()
        self.save()

    def bind_branch(
        self,
        step: StepRecord,
        *,
        repo: str,
        base: str,
        branch: str,
        workspace: str,
        start_commit: str | None,
    ) -> None:
        """Where a sandboxed step's work goes (`start_commit` None: kept from the killed run)."""
        if start_commit is not None:
            step.start_commit = start_commit
        step.repo, step.base_branch, step.branch = repo, base, branch
        step.workspace = workspace
        self.save()

    def set_head(self, step: StepRecord, commit: str | None) -> None:
        """The step branch's tip (saved with the step's next change)."""
        step.head_commit = commit

    def record_landing(self, step: StepRecord, landing: Landing) -> None:
        """How merging the step into its base went (saved when the step finishes)."""
        step.merged = landing.merged
        step.merge_commit = landing.commit if landing.merged else None
        step.conflicts = list(landing.conflicts)

    def begin_iteration(self, step: StepRecord, iteration: IterationRecord) -> None:
        step.iterations.append(iteration)
        self.save()

    def drop_iteration(self, step: StepRecord, iteration: IterationRecord) -> None:
        """An iteration whose agent never started: it is forgotten."""
        if step.iterations and step.iterations[-1] is iteration:
            step.iterations.pop()
            self.save()

    def set_container(self, iteration: IterationRecord, container_id: str | None) -> None:
        """The iteration's container (saved when the iteration ends)."""
        iteration.container_id = container_id

    def set_log_size(self, iteration: IterationRecord, written: int, dropped: int) -> None:
        """How much of the iteration's output its log holds (saved when the iteration ends)."""
        iteration.log_bytes = written
        iteration.log_dropped = dropped

    def abort_iteration(self, iteration: IterationRecord, *, interrupted: bool) -> None:
        """An iteration cut short; one cut by Ctrl-C is not counted (`--resume` runs it again)."""
        iteration.ended = now()
        iteration.reason = IterationEnd.INTERRUPTED if interrupted else IterationEnd.ERROR
        iteration.counted = iteration.reason not in UNCOUNTED
        self.save()

    def end_iteration(self, iteration: IterationRecord, result: IterationResult) -> None:
        """The one place an `IterationResult` becomes the record of its iteration."""
        iteration.ended = result.ended
        iteration.exit_code = result.exit_code
        iteration.marker = result.marker
        iteration.reason = result.reason
        iteration.counted = result.counted
        iteration.changed = result.changed
        iteration.claude = result.claude
        iteration.error_tail = result.error_tail
        iteration.denied = list(result.denied)
        iteration.denied_more = result.denied_more
        iteration.network = result.network
        iteration.note = result.note
        self.save()

    def set_denied(
        self,
        iteration: IterationRecord,
        denied: list[DeniedRecord],
        more: int,
        network: NetworkRecord | None = None,
    ) -> None:
        """The refusals (and requests) of an iteration whose last log lines came after its end
        was recorded."""
        iteration.denied = denied
        iteration.denied_more = more
        if network is not None:
            iteration.network = network
        self.save()

    def count_iteration(self, iteration: IterationRecord) -> None:
        iteration.counted = True
        self.save()


class ActiveRun(RecordWriter):
    """The record of the run in progress; every change is saved at once."""

    def __init__(self, directory: Path, record: RunRecord) -> None:
        self.directory = directory
        self.record = record

    def save(self) -> None:
        write_atomic(self.directory / "run.json", self.record.model_dump_json(indent=2))

    def reopen(self) -> None:
        """Resume: the run runs again, in this process (the pause is not in its duration)."""
        record = self.record
        moments = [m for s in record.steps for i in s.iterations for m in (i.started, i.ended) if m]
        since = record.pauses[-1].end if record.pauses else record.started
        record.pauses.append(Pause(start=session_end(record.ended, since, moments), end=now()))
        self.record.status = Status.RUNNING
        self.record.pid = os.getpid()
        self.record.ended = None
        self.save()

    def add_step(self, agent: str) -> StepRecord:
        """A new step at the end of the run (forge stages are added as they start)."""
        step = StepRecord(
            index=len(self.record.steps) + 1, agent=agent, iterations_max=1, loop=False
        )
        self.record.steps.append(step)
        self.save()
        return step

    def set_base(self, branch: str | None, commit: str | None) -> None:
        self.record.base_branch = branch
        self.record.base_commit = commit
        self.save()

    def set_engine(self, engine: str) -> None:
        """The Docker engine the run's containers and volumes are on (not the local one)."""
        self.record.engine = engine
        self.save()

    def abort(self, step: StepRecord, index: int, status: Ended, reason: Reason | str) -> None:
        """Step `index` was interrupted or failed, and the run with it."""
        step.status = status
        step.reason = reason
        step.ended = now()
        self.record.status = status
        self.record.reason = reason
        self.record.failed_at = index
        self.record.ended = now()
        self.save()

    def finish(self, *, success: bool, failed_at: int | None, reason: Reason | str | None) -> None:
        self.record.status = Status.COMPLETE if success else Status.INCOMPLETE
        self.record.failed_at = failed_at
        self.record.reason = reason
        self.record.ended = now()
        self.save()

    def set_pr(self, pull: PullRecord) -> None:
        """The run's pull request, or why it has none (`--pr`, `fks pr RUN`)."""
        self.record.pr = pull
        self.save()

    def end(self, status: Ended, reason: Reason | str | None) -> None:
        """The run stopped between steps (a forge task interrupted, or failed on an error)."""
        self.record.status, self.record.reason, self.record.ended = status, reason, now()
        self.save()

    def add_deliveries(self, deliveries: Sequence[DeliveryRecord]) -> None:
        """Notifications sent about the run (after it ended, too)."""
        if deliveries:
            self.record.deliveries.extend(deliveries)
            self.save()

    def log_path(self, step: StepRecord, attempt: int) -> Path:
        """A new log file for attempt `attempt` of `step` (attempts count rate-limit retries too)."""
        folder = self.directory / f"{step.index:02d}-{slug(step.agent)}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{attempt:03d}.log"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.directory))
