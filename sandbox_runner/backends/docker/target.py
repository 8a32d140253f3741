"""What one place a run's steps run gives the backend (`Target`): its engine, its refusals,
its workspaces (which bring their runner and export channel), its egress proxy and its
clean-up. `targets.target_for` makes the run's; the backend, clean-up and preflight name only
this."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.egress.proxy import EgressProxy
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
    from sandbox_runner.git.repo import Repo
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings
    from sandbox_runner.records.record import RunRecord
    from sandbox_runner.records.store import ActiveRun

Warn = Callable[[str], None]


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

    def record(self, run: ActiveRun) -> None:
        """Note the engine in the run's record (for `fks clean`)."""
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

    def clean(self, repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
        """`fks clean`: remove what dead runs left on the target; how many things."""
        ...
