"""What one place a run's steps run gives the backend (`Target`): its engine, its refusals,
its workspaces (which bring their runner and export channel), its egress proxy and its
clean-up. `targets.target_for` makes the run's; the backend, clean-up and preflight name only
this."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.egress.proxy import EgressProxy
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings

Warn = Callable[[str], None]


@dataclass(frozen=True)
class DeadStep:
    """A step of a dead run that did not complete: its work may still be in its workspace."""

    index: int
    agent: str
    branch: str
    workspace: str
    repo: str | None


@dataclass(frozen=True)
class DeadRun:
    """A run whose process is gone, as `fks clean` read its record."""

    id: str
    engine: str | None
    """The Docker engine it ran on, when not the local one."""
    repos: frozenset[str]
    """The repositories its steps worked in."""
    unfinished: tuple[DeadStep, ...] = ()


@dataclass(frozen=True)
class Leftovers:
    """What `fks clean` may remove: what dead runs of `repos` (`every`: of every repository)
    left, never anything of a run in `live`."""

    repos: frozenset[str]
    every: bool
    live: frozenset[str]
    """The ids of the runs whose process still runs."""
    dead: Mapping[str, DeadRun]
    """The project's runs whose process is gone, by id."""
    find: Callable[[str, Path], DeadRun | None]
    """The record of a run whose workspace names another repository (None: it has none)."""

    def run(self, run_id: str, repo: Path) -> DeadRun | None:
        """Dead run `run_id` of repository `repo`, as its record says (None: no record)."""
        return self.dead.get(run_id) or self.find(run_id, repo)


class Target(Protocol):
    """One place a run's steps run."""

    def connect(self) -> docker.DockerClient:
        """A client of the target's engine, answering (SandboxError in one line if not)."""
        ...

    def check_step(self, settings: SandboxSettings, where: str, agent: AgentCommand) -> None:
        """What a step's settings ask that this target cannot give (SandboxError)."""
        ...

    def egress_proxy(self, client: docker.DockerClient, **options: Any) -> EgressProxy:
        """The egress proxy of a run here, with EgressProxy's `options` (not started yet)."""
        ...

    def present(self, client: docker.DockerClient, image: str) -> None:
        """Make `image` available to the target's engine, where fks can."""
        ...

    def recorded_engine(self) -> str | None:
        """The engine to name in the run's record (for `fks clean`); None: the local one."""
        ...

    def open(self, stack: ExitStack) -> None:
        """Start what the run needs on this side for as long as `stack` lives."""
        ...

    def workspace(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: dict[str, str],
        image: str,
    ) -> VolumeWorkspace:
        """The workspace volume `name` of `repo` (labelled `labels`), for steps in `image`."""
        ...

    def warm(self, iterations: int) -> int:
        """Iterations whose containers may be started ahead (0: cold)."""
        ...

    def release(
        self,
        client: docker.DockerClient,
        run_id: str,
        workspaces: list[VolumeWorkspace],
        kept: set[str],
        *,
        image: str,
        warn: Warn,
    ) -> None:
        """At the run's end: remove its workspaces but those `kept` for --resume (and what
        else it left on the target)."""
        ...

    def clean(self, leftovers: Leftovers) -> int:
        """`fks clean`: remove what dead runs left on the target; how many things."""
        ...
