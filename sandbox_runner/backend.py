"""Where steps run: the `Backend` protocol, the value a backend hands the loop for each step,
and `LocalBackend` (agents as host processes, in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.agents import AgentCommand, resolve_agent
from sandbox_runner.config import AgentConfig, ChainPlan
from sandbox_runner.dsl import Step
from sandbox_runner.prompts import PromptSource, resolve_prompt
from sandbox_runner.sandbox.base import Sandbox
from sandbox_runner.sandbox.local import LocalSandbox

if TYPE_CHECKING:
    from sandbox_runner.loop import IterationResult, StepOutcome
    from sandbox_runner.output import Reporter
    from sandbox_runner.store import ActiveRun, StepRecord


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
    land: Callable[[StepOutcome], StepOutcome] | None = None
    """Called once the loop ends (complete or not); may turn a complete step incomplete."""


class Backend(Protocol):
    """Gives each step a place to run: in place on the host, or sandboxed on a worktree."""

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

    def planned_cwd(self, command: AgentCommand) -> str:
        """For --dry-run: the directory the agent will run in."""
        ...

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        """For --dry-run and -v: what the agent may reach (None: the host's network)."""
        ...

    def preflight(self, steps: list[Step]) -> None:
        """Check what can be checked before anything starts (raises FksError)."""
        ...

    def session(self, run: ActiveRun, reporter: Reporter) -> AbstractContextManager[None]:
        """The run's lifetime: set up before the first step, released after the last."""
        ...

    def step(
        self, index: int, step: Step, record: StepRecord
    ) -> AbstractContextManager[PreparedStep]:
        """Prepare the step; leaving the context releases what it holds."""
        ...

    def review_hint(self, record: StepRecord) -> list[str]:
        """Lines telling the user how to look at a step that did not land."""
        ...


class LocalBackend:
    """Agents run as host processes, in place, in the project directory."""

    def __init__(
        self, *, cwd: Path, agents: dict[str, AgentConfig], sandbox: Sandbox | None = None
    ) -> None:
        self._cwd = cwd
        self._agents = agents
        self._sandbox = sandbox or LocalSandbox()
        self._progress: Callable[[], str | None] | None = None
        self._probed = False

    @property
    def base_branch(self) -> str | None:
        return None

    def resolve(self, step: Step) -> AgentCommand:
        return resolve_agent(step.agent, agents=self._agents, cwd=self._cwd)

    def describe(self) -> list[str]:
        return []

    def planned_cwd(self, command: AgentCommand) -> str:
        return str(command.cwd)

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        return None

    def preflight(self, steps: list[Step]) -> None:
        return None

    def session(self, run: ActiveRun, reporter: Reporter) -> AbstractContextManager[None]:
        return nullcontext()

    def review_hint(self, record: StepRecord) -> list[str]:
        return []

    @contextmanager
    def step(self, index: int, step: Step, record: StepRecord) -> Iterator[PreparedStep]:
        if not self._probed:  # one git call, only once something really runs
            self._progress, self._probed = _git_progress_probe(self._cwd), True
        yield PreparedStep(agent=self.resolve(step), sandbox=self._sandbox, progress=self._progress)


def _git_progress_probe(cwd: Path) -> Callable[[], str | None] | None:
    from sandbox_runner.progress import git_toplevel, workspace_fingerprint

    top = git_toplevel(cwd)
    if top is None:
        return None
    return lambda: workspace_fingerprint(top)


def step_prompt(
    step: Step,
    plan: ChainPlan,
    agents: dict[str, AgentConfig],
    cwd: Path,
    cli_prompt: str | None,
    cli_prompt_file: Path | None,
) -> PromptSource:
    """The prompt source of one step: CLI > step > chain > agent default > none."""
    agent_cfg = agents.get(step.agent)
    return resolve_prompt(
        cwd=cwd,
        cli_prompt=cli_prompt,
        cli_prompt_file=cli_prompt_file,
        levels=[
            ("step", step.prompt, step.prompt_file),
            ("chain", plan.prompt, plan.prompt_file),
            (
                "agent default",
                agent_cfg.default_prompt if agent_cfg else None,
                agent_cfg.default_prompt_file if agent_cfg else None,
            ),
        ],
    )
