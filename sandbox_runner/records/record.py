"""What a run record holds (`run.json`): the run, its steps and their iterations, as pydantic
models; `RunStore` (`records/store.py`) reads and writes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field, GetPydanticSchema
from pydantic_core import core_schema

from sandbox_runner import __version__
from sandbox_runner.outcomes import IterationEnd, Reason, Status, parse_reason
from sandbox_runner.records.timing import Pause
from sandbox_runner.results.reported import (
    ClaudeStats,
    DeniedRecord,
    NetworkRecord,
    RecordModel,
)
from sandbox_runner.signals import pid_alive


def _reason_schema(_source: Any, _handler: Any) -> core_schema.CoreSchema:
    """Text in run.json, a `Reason` once read (other text stays text), text again when saved."""
    return core_schema.no_info_after_validator_function(
        parse_reason,
        core_schema.str_schema(),
        serialization=core_schema.to_string_ser_schema(),
    )


RecordedReason = Annotated[Reason | str, GetPydanticSchema(_reason_schema)]
"""A reason as run.json keeps it: a `Reason`, or text fks does not know as one (the error of a
failed step or run, a reason an older fks wrote)."""


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
    reason: RecordedReason | None = None
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
    status: Status = Status.PENDING
    reason: RecordedReason | None = None
    """Why it ended (the error's text for a failed step)."""
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


class DeliveryRecord(RecordModel):
    """One notification sent to one place (`notify` in forge/chains.json)."""

    event: str
    """What it told of: run_end, failed, budget, auth_error, question, review or pr."""
    service: str
    """The place's service (its URL's scheme: ntfy, json, slack…), never its URL."""
    target: int
    """The place's index in `notify`."""
    ok: bool
    time: datetime
    error: str | None = None
    """Why it failed (one line, masked)."""


class PullRecord(RecordModel):
    """The GitHub pull request of a run's landed branch, or why there is none."""

    repo: str
    """`owner/name`."""
    head: str
    """The pushed branch."""
    base: str
    number: int | None = None
    url: str | None = None
    state: str | None = None
    """`open`, `draft`, `closed`, `merged` (None: fks opened none)."""
    error: str | None = None
    """What failed, in one line (`fks pr RUN` tries again)."""
    note: str | None = None
    """Why none was needed (GitHub: no commits between the base and the branch)."""
    updated: datetime | None = None


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
    pr: bool = False
    """`--pr`: the run's landed branch becomes a GitHub pull request."""


class RunRecord(RecordModel):
    """`.forge/runs/<id>/run.json`."""

    id: str
    version: str = __version__
    status: Status = Status.RUNNING
    reason: RecordedReason | None = None
    """Why it ended: its last step's reason (the error's text for a failed run)."""
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
    deliveries: list[DeliveryRecord] = Field(default_factory=list)
    """Notifications sent about the run, in order."""
    pr: PullRecord | None = None
    """Its GitHub pull request (`--pr`)."""

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
        return sum(1 for s in self.steps if s.status == Status.COMPLETE)

    def prepare_resume(self, maximum: Callable[[StepRecord], int]) -> None:
        """Before `ActiveRun.reopen`: an iteration fks was killed during used itself up, and
        the first unfinished step is pending again, with `maximum(step)` iterations."""
        for step in self.steps:
            for iteration in step.iterations:
                if iteration.ended is None:
                    iteration.counted = True
                    iteration.reason = iteration.reason or IterationEnd.KILLED
            if step.status != Status.COMPLETE:
                step.status = Status.PENDING
                step.iterations_max = maximum(step)
                break


def run_alive(record: RunRecord) -> bool:
    """The run says it is running and its process still exists."""
    return record.status == Status.RUNNING and pid_alive(record.pid)
