"""Run records under `.forge/runs/<run-id>/`: `run.json` (rewritten atomically as the run goes)
and one raw log file per iteration, written as output arrives.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError

from sandbox_runner import __version__
from sandbox_runner.errors import FksError, UsageError
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.projects import remember_project
from sandbox_runner.records.reported import (
    ClaudeStats,
    DeniedRecord,
    NetworkRecord,
    RecordModel,
)
from sandbox_runner.records.timing import Pause, session_end

if TYPE_CHECKING:
    from sandbox_runner.git.landing import Landing
    from sandbox_runner.records.results import IterationResult

RECORD_BYTES = 64 << 20
"""Bytes of one run.json read at most (a step of 1,000 iterations takes about 1 MiB)."""

RunStatus = Literal["running", "complete", "incomplete", "interrupted", "failed"]
StepStatus = Literal["pending", "running", "complete", "incomplete", "interrupted", "failed"]


def now() -> datetime:
    return datetime.now(UTC)


class IterationRecord(RecordModel):
    """One agent process."""

    number: int
    """Iteration number within the step (1-based)."""
    counted: bool = True
    """False for attempts that did not use up an iteration (rate-limit back-off)."""
    started: datetime
    ended: datetime | None = None
    exit_code: int | None = None
    marker: bool = False
    """The completion marker was seen."""
    reason: str | None = None
    """Why the iteration ended the way it did: marker, once, no_marker, exit_N, timeout, …"""
    container_id: str | None = None
    log: str
    """Raw output, relative to the run directory."""
    changed: bool | None = None
    """Made a commit or changed a file (None: could not tell)."""
    claude: ClaudeStats | None = None
    error_tail: str | None = Field(default=None, exclude=False)
    """Last stderr lines of a failed iteration (for the repeated-error breaker)."""
    denied: list[DeniedRecord] = Field(default_factory=list)
    """Requests the sandbox's egress allow-list refused during the iteration, per destination,
    the most refused first (at most 20)."""
    denied_more: int = 0
    """Requests refused to destinations not in `denied`."""
    network: NetworkRecord | None = None
    """Every request made through the sandbox's egress proxy, allowed or refused (None: the
    iteration had no proxy, or fks recorded none then)."""
    note: str | None = None
    """Why it ended, with the fix, as fks showed it (turn limit, credentials, budget, stall…)."""
    log_bytes: int = 0
    """Bytes written to `log`: the output, and fks's notes where it was cut."""
    log_dropped: int = 0
    """Bytes of output not kept in `log` (nor shown): past the log limit of an iteration
    (maxLogBytes) or of the run (maxRunLogBytes). 0: the log holds all of it."""


class StepRecord(RecordModel):
    """One step of the chain."""

    index: int
    """Step number (1-based)."""
    agent: str
    iterations_max: int
    loop: bool
    status: StepStatus = "pending"
    reason: str | None = None
    started: datetime | None = None
    ended: datetime | None = None
    repo: str | None = None
    """Repository the step worked in (sandbox runs)."""
    base_branch: str | None = None
    branch: str | None = None
    """The step's branch (sandbox runs)."""
    worktree: str | None = None
    """(Runs of fks before workspaces were Docker volumes: the step's git worktree.)"""
    workspace: str | None = None
    """The Docker volume holding the step's workspace (sandbox runs)."""
    start_commit: str | None = None
    head_commit: str | None = None
    merge_commit: str | None = None
    """Commit of the base branch after the step was merged (None: not merged)."""
    merged: bool = False
    conflicts: list[str] = Field(default_factory=list)
    iterations: list[IterationRecord] = Field(default_factory=list)

    @property
    def iterations_used(self) -> int:
        return sum(1 for it in self.iterations if it.counted)

    @property
    def cost_usd(self) -> float:
        return sum((it.claude.cost_usd or 0.0) for it in self.iterations if it.claude)


class RunOptions(RecordModel):
    """How the run was started: enough to resume it."""

    chain: str | None = None
    dsl: str | None = None
    variables: dict[str, str] = Field(default_factory=dict)
    prompt: str | None = None
    prompt_file: str | None = None
    config: str | None = None
    sandbox: bool = False
    base: str | None = None
    image: str | None = None
    engine: str | None = None
    """`--engine`: the Docker engine of a `--sandbox` run."""
    runtime: str | None = None
    """`--runtime`: the OCI runtime of a `--sandbox` run's containers."""
    allow: list[str] = Field(default_factory=list)
    """`--allow` entries added to the sandbox's allow-list for this run."""
    max_cost: float | None = None
    global_args: list[str] = Field(default_factory=list)
    forge_task: str | None = None
    """The forge-tasks id of a `fks forge run` task (its stages are the run's steps)."""
    forge_session: str | None = None
    """The `fks forge run` this task's run was part of (`fks runs` groups them)."""


class RunRecord(RecordModel):
    """`.forge/runs/<id>/run.json`."""

    id: str
    version: str = __version__
    status: RunStatus = "running"
    reason: str | None = None
    started: datetime
    ended: datetime | None = None
    pid: int
    cwd: str
    options: RunOptions
    base_branch: str | None = None
    base_commit: str | None = None
    failed_at: int | None = None
    """Index (1-based) of the step that did not complete."""
    engine: str | None = None
    """`sandbox.engine` of a run on another Docker engine than the local one (for fks clean)."""
    steps: list[StepRecord] = Field(default_factory=list)
    pauses: list[Pause] = Field(default_factory=list)
    """The times between its sessions (see `--resume`): not part of its duration."""

    @property
    def label(self) -> str:
        if self.options.forge_task:
            return f"forge {self.options.forge_task}"
        return self.options.chain or self.options.dsl or "?"

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.steps)

    @property
    def log_bytes(self) -> int:
        """Bytes the run's iteration logs hold (what counts against maxRunLogBytes)."""
        return sum(it.log_bytes for s in self.steps for it in s.iterations)

    @property
    def steps_done(self) -> int:
        return sum(1 for s in self.steps if s.status == "complete")

    def prepare_resume(self, maximum: Callable[[StepRecord], int]) -> None:
        """Before `ActiveRun.reopen`: an iteration fks was killed during used itself up, and
        the first unfinished step is pending again, with `maximum(step)` iterations."""
        for step in self.steps:
            for iteration in step.iterations:
                if iteration.ended is None:
                    iteration.counted = True
                    iteration.reason = iteration.reason or "killed"
            if step.status != "complete":
                step.status = "pending"
                step.iterations_max = maximum(step)
                break


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_alive(record: RunRecord) -> bool:
    """The run says it is running and its process still exists."""
    return record.status == "running" and pid_alive(record.pid)


def project_root(cwd: Path) -> Path:
    """Where `.forge/` lives: the git work tree's top, else `cwd` itself."""
    from sandbox_runner.git.runner import git_toplevel

    return git_toplevel(cwd) or cwd


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and `os.replace`: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def slug(text: str) -> str:
    """A file- and branch-name-safe form of an agent name (`./bin/x.sh` → `x.sh`, `fk:builder` → `fk-builder`)."""
    name = text.rstrip("/").rsplit("/", 1)[-1].removesuffix(".md") if "/" in text else text
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:40] or "agent"


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
        import shutil

        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)


class RecordWriter:
    """The one writer of step and iteration records: every change to them is a method here.

    This base keeps them in memory (a step loop without a run); `ActiveRun` saves each change.
    """

    def save(self) -> None:
        """Nothing to save without a run."""

    def begin_step(self, step: StepRecord) -> None:
        step.status = "running"
        step.started = step.started or now()
        self.save()

    def finish_step(self, step: StepRecord, *, complete: bool, reason: str) -> None:
        step.status = "complete" if complete else "incomplete"
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
        iteration.reason = "interrupted" if interrupted else "error"
        iteration.counted = not interrupted
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
        self.record.status = "running"
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

    def abort(
        self, step: StepRecord, index: int, status: Literal["interrupted", "failed"], reason: str
    ) -> None:
        """Step `index` was interrupted or failed, and the run with it."""
        step.status = status
        step.reason = reason
        step.ended = now()
        self.record.status = status
        self.record.reason = reason
        self.record.failed_at = index
        self.record.ended = now()
        self.save()

    def finish(self, *, success: bool, failed_at: int | None, reason: str | None) -> None:
        self.record.status = "complete" if success else "incomplete"
        self.record.failed_at = failed_at
        self.record.reason = reason
        self.record.ended = now()
        self.save()

    def end(self, status: Literal["interrupted", "failed"], reason: str | None) -> None:
        """The run stopped between steps (a forge task interrupted, or failed on an error)."""
        self.record.status, self.record.reason, self.record.ended = status, reason, now()
        self.save()

    def log_path(self, step: StepRecord, attempt: int) -> Path:
        """A new log file for attempt `attempt` of `step` (attempts count rate-limit retries too)."""
        folder = self.directory / f"{step.index:02d}-{slug(step.agent)}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{attempt:03d}.log"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.directory))
