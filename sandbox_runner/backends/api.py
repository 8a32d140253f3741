"""What every backend implements: `Backend` (gives each step a place to run and says how its
work lands), `PreparedStep` (what it hands the loop), and the `Sandbox`/`Execution` protocols
with the value objects they exchange. A backend reads what it needs of a step's record through
`StepSoFar` and returns what happened (`RunPlace`, `BranchBinding`, `Landed`): the caller writes
the record."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from sandbox_runner.results.ended import IterationResult, StepOutcome
from sandbox_runner.results.reported import DeniedRecord, NetworkRecord

if TYPE_CHECKING:
    from sandbox_runner.git.landing import Landing
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.dsl import Step

Stream = Literal["stdout", "stderr"]
INTERRUPT_GRACE = 1.0
"""Seconds an interrupted agent has to stop on SIGINT before SIGTERM (then SIGKILL)."""


PhaseName = Literal["workspace", "proxy", "container", "checkout", "export", "import", "merge"]


@dataclass(frozen=True)
class Phase:
    """A stretch of a sandboxed step's own work (not its agent's) that has ended, and how long
    it took: the step's workspace, its egress proxy, an iteration's container, checkout,
    export and import, the step's merge."""

    name: PhaseName
    seconds: float
    detail: str = ""
    """What the phase did, when there is more to say (`kept as the last iteration left it`)."""


class Notices(Protocol):
    """Where a backend's `[fks]` lines and events go (the engine's `Reporter` is one)."""

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def phase(self, phase: Phase) -> None:
        """A phase of the backend's own work ended (shown with --verbose)."""
        ...


@dataclass(frozen=True)
class ExecSpec:
    """One agent process to run: one iteration."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment: added to the host's locally; the *only* environment in a container."""
    timeout: float | None = None
    """Seconds before the process is killed and the iteration counts as timed out."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Metadata (container labels in Docker)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Settings files of the agent's CLI, by absolute path where it runs, written before it
    starts (only by a sandbox with a `PreparedStep.cli_home`)."""
    max_cost: float | None = None
    """What the iteration may still spend at the model APIs (None: no limit); where a meter
    sees its calls (the Docker backend's egress proxy) it refuses those past it."""


@dataclass(frozen=True)
class ExecResult:
    """How a process ended."""

    exit_code: int
    timed_out: bool = False
    container_id: str | None = None
    oom_limit: str | None = None
    """The memory limit the process was killed for exceeding (None: it was not OOM-killed)."""


class Execution(Protocol):
    """A started process. Leaving its context stops it and releases everything it holds."""

    @property
    def id(self) -> str:
        """Process id, container id, or a swarm service's id."""
        ...

    @property
    def container_id(self) -> str | None:
        """The container's id when the process runs in one (recorded per iteration), else None."""
        ...

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        """Raw output as it arrives, until the process has exited and its output is drained.

        Enforces the spec's timeout: on expiry the process is killed and iteration ends.
        """
        ...

    def wait(self) -> ExecResult:
        """Exit status (after `chunks()` is exhausted)."""
        ...

    def kill(self) -> None:
        """Stop the process now (from any thread); `chunks()` then ends."""
        ...

    def metered_cost(self) -> float | None:
        """What a meter outside the agent's reach counted of its model API calls so far (None:
        none sees them)."""
        ...


class Sandbox(Protocol):
    """Runs `ExecSpec`s. The loop and chain code does not know which backend it has."""

    name: str

    def start(self, spec: ExecSpec) -> AbstractContextManager[Execution]:
        """Start the process; the context manager stops and removes it on exit, always."""
        ...


class IterationSoFar(Protocol):
    """What a backend reads of an iteration's record: when it ended and what it requested."""

    @property
    def ended(self) -> datetime | None: ...

    @property
    def denied(self) -> Sequence[DeniedRecord]: ...

    @property
    def denied_more(self) -> int: ...

    @property
    def network(self) -> NetworkRecord | None: ...


class StepSoFar(Protocol):
    """What a backend reads of a step's record (the caller's, which it never writes): where an
    earlier session put its work, whether it landed, and its iterations so far."""

    @property
    def branch(self) -> str | None: ...

    @property
    def base_branch(self) -> str | None: ...

    @property
    def repo(self) -> str | None: ...

    @property
    def workspace(self) -> str | None: ...

    @property
    def start_commit(self) -> str | None: ...

    @property
    def merged(self) -> bool: ...

    @property
    def conflicts(self) -> Sequence[str]: ...

    @property
    def iterations(self) -> Sequence[IterationSoFar]: ...


@dataclass(frozen=True)
class RunPlace:
    """Where a run's steps land, as its backend's session found it (for the run's record)."""

    base_branch: str | None = None
    """The branch steps land on (None: steps run in place)."""
    base_commit: str | None = None
    """Its tip when the session began."""
    engine: str | None = None
    """The Docker engine the run's containers and volumes are on, when not the local one."""


@dataclass(frozen=True)
class BranchBinding:
    """Where a sandboxed step's work goes: its branch of `repo`, and the workspace it is on."""

    repo: str
    base: str
    branch: str
    workspace: str
    start_commit: str | None
    """The base's tip the branch was made at (None: the step resumes a branch of its own)."""


@dataclass(frozen=True)
class IterationTraffic:
    """The requests an iteration made through the egress proxy: refusals per destination (the
    most refused first), those not listed, and every request."""

    denied: tuple[DeniedRecord, ...] = ()
    denied_more: int = 0
    network: NetworkRecord | None = None


@dataclass(frozen=True)
class Landed:
    """What landing a step did: its outcome (a merge that failed makes it incomplete), its
    branch's tip, the merge, and what its last iteration requested after it was counted."""

    outcome: StepOutcome
    head: str | None = None
    landing: Landing | None = None
    """How merging the step into its base went (None: a step that did not complete is not
    merged)."""
    late: IterationTraffic | None = None
    """The last iteration's requests, those logged after it ended included (None: none)."""


@dataclass
class PreparedStep:
    """A step ready to run: its resolved agent, where it runs, and how its work lands."""

    agent: AgentCommand
    sandbox: Sandbox
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    progress: Callable[[], str | None] | None = None
    after_iteration: Callable[[IterationResult], IterationResult] | None = None
    """Run after every iteration: its work synced, its traffic added (may make it a failure)."""
    land: Callable[[StepOutcome], Landed] | None = None
    """Called once the loop ends (complete or not); may turn a complete step incomplete."""
    binding: BranchBinding | None = None
    """Where the step's work goes (None: it works in place)."""
    head: Callable[[], str | None] | None = None
    """The tip of the step's branch now (after an interruption: with what was saved of it)."""
    cli_home: Path | None = None
    """Where the agent runs apart from this machine (a container): the directory there, empty
    for each iteration, that holds its CLI's settings files (sent in `ExecSpec.files`); the
    agent then sees only the spec's environment. None: a temporary directory here, written by
    fks, and this machine's environment."""


class Backend(Protocol):
    """Gives each step a place to run: in place on the host (`local.py`), or in containers
    on a workspace of its own and a branch of its repository (`docker/`)."""

    @property
    def base_branch(self) -> str | None:
        """The branch steps land on (None when steps run in place)."""
        ...

    def resolve(self, step: Step) -> AgentCommand:
        """Resolve the step's agent before anything starts (raises AgentNotFoundError)."""
        ...

    def describe(self) -> list[str]:
        """Lines for --dry-run about where steps run."""
        ...

    def planned(self, command: AgentCommand) -> tuple[AgentCommand, str]:
        """For --dry-run and -v: the agent as it will run (in a container: its paths there),
        and the directory it will run in."""
        ...

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        """For --dry-run and -v: what the agent may reach (None: the host's network)."""
        ...

    def preflight(self, steps: list[Step]) -> None:
        """Check what can be checked before anything starts (raises FksError)."""
        ...

    def session(
        self, run_id: str, reporter: Notices, *, resumed: bool = False
    ) -> AbstractContextManager[RunPlace]:
        """Run `run_id`'s lifetime: set up before the first step, released after the last.
        `resumed`: the run ran before (its killed process may have left things behind)."""
        ...

    def step(
        self, index: int, step: Step, record: StepSoFar
    ) -> AbstractContextManager[PreparedStep]:
        """Prepare the step; leaving the context releases what it holds."""
        ...

    def review_hint(self, record: StepSoFar) -> list[str]:
        """Lines telling the user how to look at a step that did not land."""
        ...
