"""Run records under `.forge/runs/<run-id>/`: `run.json` (rewritten atomically as the run goes)
and one raw log file per iteration, written as output arrives.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox_runner import __version__
from sandbox_runner.errors import FksError, UsageError

FORGE_DIR = ".forge"
RUNS_DIR = "runs"
RunStatus = Literal["running", "complete", "incomplete", "interrupted", "failed"]
StepStatus = Literal["pending", "running", "complete", "incomplete", "interrupted", "failed"]


def now() -> datetime:
    return datetime.now(UTC)


class _Record(BaseModel):
    # Built on first use: `fks --help` and dry runs never pay for these schemas.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ClaudeStats(_Record):
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


class DeniedRecord(_Record):
    """Refused requests to one destination."""

    host: str
    port: int | None = None
    count: int

    def describe(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else self.host
        return f"{self.count} request{'s' if self.count != 1 else ''} to {where}"


class IterationRecord(_Record):
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
    """Requests the sandbox's egress allow-list refused during the iteration."""


class StepRecord(_Record):
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


class RunOptions(_Record):
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
    allow: list[str] = Field(default_factory=list)
    """`--allow` entries added to the sandbox's allow-list for this run."""
    max_cost: float | None = None
    global_args: list[str] = Field(default_factory=list)


class RunRecord(_Record):
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
    steps: list[StepRecord] = Field(default_factory=list)

    @property
    def label(self) -> str:
        return self.options.chain or self.options.dsl or "?"

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.steps)

    @property
    def steps_done(self) -> int:
        return sum(1 for s in self.steps if s.status == "complete")


@dataclass(frozen=True)
class ForgeLayout:
    """Where fks keeps its files in a project: `.forge/` and everything under it."""

    project: Path

    @property
    def root(self) -> Path:
        return self.project / FORGE_DIR

    @property
    def runs(self) -> Path:
        """One directory per run: `run.json` and the iteration logs."""
        return self.root / RUNS_DIR

    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def lock(self, name: str) -> Path:
        """The lock file of one base branch (`name` already made file-name safe)."""
        return self.root / "locks" / f"{name}.lock"

    @property
    def legacy_dirs(self) -> tuple[Path, ...]:
        """`.forge/sandbox` and `.forge/worktrees`, made by older versions of fks."""
        return (self.root / "sandbox", self.root / "worktrees")


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
            return RunRecord.model_validate_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FksError(f"run '{run_id}' has no record at {path}") from None
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


class ActiveRun:
    """The record of the run in progress; every change is saved at once."""

    def __init__(self, directory: Path, record: RunRecord) -> None:
        self.directory = directory
        self.record = record

    def save(self) -> None:
        write_atomic(self.directory / "run.json", self.record.model_dump_json(indent=2))

    def log_path(self, step: StepRecord, attempt: int) -> Path:
        """A new log file for attempt `attempt` of `step` (attempts count rate-limit retries too)."""
        folder = self.directory / f"{step.index:02d}-{slug(step.agent)}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{attempt:03d}.log"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.directory))
