"""`--sandbox`: every step in Docker containers on a workspace of its own (a Docker volume)
and its own branch, merged back into the base branch when it completes. Where the containers
run (the local engine, a remote one, a swarm) is the run's `Target`, chosen once here.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import (
    Notices,
    Phase,
    PreparedStep,
    RunPlace,
    StepSoFar,
)
from sandbox_runner.backends.docker.agent_view import (
    check_committed,
    container_agent,
    planned_agent,
    step_mounts,
    step_repo,
)
from sandbox_runner.backends.docker.checks import check_engine, check_static, gvisor_runtimes
from sandbox_runner.backends.docker.cleanup import remove_run_containers, remove_run_proxy_volumes
from sandbox_runner.backends.docker.egress.pool import (
    Credentials,
    ProxyPool,
    read_credentials,
    through_proxy,
)
from sandbox_runner.backends.docker.egress.proxy import EgressProxy
from sandbox_runner.backends.docker.engine.connect import supported_engine
from sandbox_runner.backends.docker.landing import (
    StepLanding,
    dropped_on_early_failure,
    review_lines,
    start_branch,
)
from sandbox_runner.backends.docker.preflight import (
    check_agents,
    check_clis,
    check_credentials,
    check_networks,
    prepare_image,
)
from sandbox_runner.backends.docker.runners.container import ContainerSettings
from sandbox_runner.backends.docker.secret_checks import check_secrets
from sandbox_runner.backends.docker.settings import (
    DEFAULT_TIMEOUT,
    container_settings,
    describe_sandbox,
    network_mode,
    planned_network,
    step_env,
    step_labels,
)
from sandbox_runner.backends.docker.target import Target
from sandbox_runner.backends.docker.targets import target_for
from sandbox_runner.backends.docker.workspace.kept import kept_for_run
from sandbox_runner.backends.docker.workspace.sandbox import WorkspaceSandbox
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace, volume_name
from sandbox_runner.git.repo import (
    Repo,
    exclude_forge_dir,
    identity_env,
    leftover_ref,
    open_repo,
    require_base,
    rev,
    step_branch,
)
from sandbox_runner.images.devcontainer import DEVCONTAINER, ensure_for_run
from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE
from sandbox_runner.labels import LABEL_PID, LABEL_REPO, LABEL_RUN, LABEL_RUNTIME
from sandbox_runner.paths import slug
from sandbox_runner.plan.agents import AgentCommand, resolve_agent
from sandbox_runner.plan.claude_agents import parse_claude_agent_path
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker


class SandboxBackend:
    """Steps in containers, each on a workspace volume and a branch of its repository."""

    def __init__(
        self,
        *,
        cwd: Path,
        agents: dict[str, AgentConfig],
        settings: SandboxSettings,
        base: str | None,
        checked_base: bool = False,
        keep_interrupted: bool = True,
        dry_run: bool = False,
        secret_files: Sequence[str] = (),
    ) -> None:
        """`checked_base`: the caller has already checked `base` (fks forge: its own rules).
        `keep_interrupted`: keep an interrupted step's workspace for `--resume` (fks forge
        resumes from the task's branch in a new run, so it has no use for it). `dry_run`: the
        steps are only shown, so a secret whose value cannot be read here is shown so, not
        refused. `secret_files`: what secrets and caCerts read in the repository (relative to
        it): no landing changes them."""
        # Before anything is opened or started: an engine runs cannot use is refused.
        self._target = target_for(supported_engine(settings.engine))
        self._cwd = cwd
        self._agents = agents
        self._settings = settings
        self._image_default = DEFAULT_AGENT_IMAGE
        self._repo = open_repo(cwd)
        self._base = base if checked_base and base else require_base(self._repo, base)
        self._client: docker.DockerClient | None = None
        self._run_id: str | None = None
        self._reporter: Notices | None = None
        self._workspaces: dict[Path, VolumeWorkspace] = {}
        self._stack = ExitStack()
        """What lives as long as the run: its egress proxies (started with the first step
        that needs one), and what its target starts."""
        self._proxies: ProxyPool | None = None
        self._kept: set[str] = set()
        """Workspaces of interrupted steps: kept for --resume (and `fks clean`)."""
        self._users: dict[str, str | None] = {}
        """The user each image names (label fks.user), else None: the host's uid:gid."""
        self._devcontainer: str | None = None
        self._image_warnings: list[str] = []
        """Images that hold another fks or Claude Code than expected: said once per run."""
        self._keep_interrupted = keep_interrupted
        self._dry_run = dry_run
        self._credentials: dict[str, Credentials] = {}
        self._secret_files = tuple(secret_files)
        self._gvisor: frozenset[str] = frozenset()
        """The runtimes the steps name that are gVisor's (the engine says which)."""
        self._resumed = False

    # --- Backend protocol ---------------------------------------------------------------------

    @property
    def base_branch(self) -> str | None:
        return self._base

    def settings_for(self, agent: str) -> SandboxSettings:
        cfg = self._agents.get(agent)
        return self._settings.merged(cfg.sandbox if cfg else None)

    def resolve(self, step: Step) -> AgentCommand:
        """Check the agent the way the container will see it (paths inside the repository)."""
        cfg = self._agents.get(step.agent)
        target = (cfg.path if cfg else None) or step.agent
        external = parse_claude_agent_path(target or step.agent, self._cwd)
        if external is not None and external.project.is_dir():
            open_repo(external.project, what=f"--sandbox (agent '{step.agent}')")
        visible = [Path(m) for m in self.settings_for(step.agent).mounts]
        return resolve_agent(
            step.agent,
            agents=self._agents,
            cwd=self._cwd,
            on_host=False,
            visible=[self._repo.top, *visible],
        )

    def describe(self) -> list[str]:
        return describe_sandbox(self._settings, self._image_default, self._base)

    def planned(self, command: AgentCommand) -> tuple[AgentCommand, str]:
        return planned_agent(command, self._repo, self._base, self._cwd)

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        return planned_network(self.settings_for(step.agent), command, self._repo.top)

    def preflight(self, steps: list[Step]) -> None:
        """Before anything starts: every setting holds (secrets readable here), Docker answers,
        images and agents exist."""
        for step in steps:
            settings, where = self.settings_for(step.agent), _where(self._agents, step.agent)
            check_static(settings, where)
            check_secrets(settings, where, self._repo.top, os.environ, values=not self._dry_run)
            if not self._dry_run:  # read once, before any agent runs (and could change a file)
                self._credentials[step.agent] = read_credentials(settings, self._repo.top)
            agent = self.resolve(step)
            check_committed(agent, step.agent, self._repo, self._base)
            self._target.check_step(settings, where, agent)
        self._client = client = self._target.connect()
        programs: dict[str, set[str]] = {}
        for step in steps:
            settings = self.settings_for(step.agent)
            check_engine(client, settings, _where(self._agents, step.agent))
            image = self._image(settings)
            if image not in programs:
                self._users[image] = prepare_image(
                    client, self._target, image, self._image_warnings
                )
            programs.setdefault(image, set()).add(self.resolve(step).program)
        check_clis(
            client, [(self._image(self.settings_for(s.agent)), self.resolve(s)) for s in steps]
        )
        check_agents(client, programs)
        if any(self.settings_for(step.agent).runtime for step in steps):
            self._gvisor = gvisor_runtimes(client.info().get("Runtimes") or {})
        wanted = {network_mode(self.settings_for(s.agent)) for s in steps}
        check_networks(client, self._target, wanted)
        check_credentials(self.resolve(step) for step in steps)

    def _image(self, settings: SandboxSettings) -> str:
        """The image's name; `devcontainer` is the repository's, built on first use."""
        if settings.image != DEVCONTAINER:
            return settings.image or self._image_default
        if self._devcontainer is None:
            self._devcontainer = ensure_for_run(self._repo.top, say=sys.stderr)
        return self._devcontainer

    @contextmanager
    def session(
        self, run_id: str, reporter: Notices, *, resumed: bool = False
    ) -> Iterator[RunPlace]:
        self._run_id, self._reporter, self._resumed = run_id, reporter, resumed
        for warning in dict.fromkeys(self._image_warnings):
            reporter.warn(warning)
        place = RunPlace(self._base, rev(self._repo, self._base), self._target.recorded_engine())
        exclude_forge_dir(self._repo.top)
        assert self._client is not None, "preflight() first"
        if resumed:  # a killed process may have left some; a new run has none to list
            remove_run_containers(self._client, run_id)
            remove_run_proxy_volumes(self._client, run_id)
        self._proxies = ProxyPool(self._client, run_id, self._stack, make=self._target.egress_proxy)
        self._target.open(self._stack)
        try:
            with self._stack:
                yield place
        finally:
            with deferred_signals():
                self._target.release(
                    self._client,
                    run_id,
                    list(self._workspaces.values()),
                    self._kept,
                    image=next(iter(self._users), self._image_default),
                    warn=reporter.warn,
                )

    def review_hint(self, record: StepSoFar) -> list[str]:
        return review_lines(record, self._repo.top, self._base, self._run_id, self._kept)

    # --- one step -----------------------------------------------------------------------------

    def _workspace(self, repo: Repo, image: str, runtime: str | None) -> VolumeWorkspace:
        """The repository's workspace, made on first use (see `_new_workspace`)."""
        assert self._run_id is not None and self._client is not None
        if repo.top not in self._workspaces:
            keep = bool(self._settings.keep_workspace) and repo.top == self._repo.top
            at = (self._target, self._client, self._stack)
            self._workspaces[repo.top] = _new_workspace(
                at, repo, (self._run_id, image, runtime), keep, self._resumed, self._kept
            )
        return self._workspaces[repo.top]

    @contextmanager
    def step(self, index: int, step: Step, record: StepSoFar) -> Iterator[PreparedStep]:
        assert self._run_id is not None and self._client is not None, "preflight(), session()"
        assert self._reporter is not None
        host_view = self.resolve(step)
        repo, base, relative = step_repo(host_view, self._repo, self._base, self._cwd)
        settings = self.settings_for(step.agent)
        image = self._image(settings)
        workspace = self._workspace(repo, image, settings.runtime)
        resumed = record.branch is not None
        branch = record.branch or step_branch(self._run_id, index, slug(step.agent))
        binding = start_branch(record, repo, base, branch, workspace.name, resumed=resumed)
        with dropped_on_early_failure(repo, branch, record, resumed=resumed):
            agent = container_agent(host_view, repo, relative, self._cwd)
            container, env, proxy = self._container(index, step, agent, repo, image, workspace)
            with tempfile.TemporaryDirectory(prefix="fks-export-") as scratch:
                sandbox = WorkspaceSandbox(
                    self._client,
                    container,
                    workspace,
                    branch=branch,
                    leftover=leftover_ref(self._run_id, index),
                    scratch=Path(scratch),
                    new_step=not resumed,
                    warm=_warm(self._target, settings, step),
                    notices=self._reporter,
                    meter=proxy,
                )
                landing = StepLanding(
                    run_id=self._run_id,
                    reporter=self._reporter,
                    base=self._base,
                    index=index,
                    step=step,
                    record=record,
                    binding=binding,
                    sandbox=sandbox,
                    env=env,
                    proxy=proxy,
                    secret_files=self._secret_files,
                )
                landing.open(resumed=resumed)
                self._kept.discard(workspace.name)
                kept = self._kept if self._keep_interrupted else None
                with landing.kept_when_stopped(kept, resumed=resumed), closing(sandbox):
                    yield landing.prepared(agent, settings.timeout or DEFAULT_TIMEOUT)

    def _container(
        self,
        index: int,
        step: Step,
        agent: AgentCommand,
        repo: Repo,
        image: str,
        workspace: VolumeWorkspace,
    ) -> tuple[ContainerSettings, dict[str, str], EgressProxy | None]:
        """The step's containers as settings, their environment, and its egress proxy (started
        with the first step that needs one)."""
        assert self._run_id is not None and self._proxies is not None
        assert self._reporter is not None
        settings = self.settings_for(step.agent)
        env = step_env(agent, settings, identity_env(repo))
        mounts, user = step_mounts(agent, settings, workspace), self._users.get(image)
        labels = step_labels(self._run_id, index, repo)
        gvisor = settings.runtime in self._gvisor
        container = container_settings(image, mounts, labels, settings, user, gvisor=gvisor)
        began = time.monotonic()
        credentials = self._credentials.get(step.agent)
        proxy = self._proxies.for_step(agent, settings, repo, credentials)
        if proxy is None:
            return container, env, None
        self._reporter.phase(Phase("proxy", time.monotonic() - began, "the run's egress proxy"))
        container, env = through_proxy(proxy, container, env, settings.env)
        return container, env, proxy


def _where(agents: Mapping[str, AgentConfig], agent: str) -> str:
    """Where a step's settings come from, for messages."""
    cfg = agents.get(agent)
    return f"agents.{agent}.sandbox" if cfg is not None and cfg.sandbox else "sandbox"


def _new_workspace(
    at: tuple[Target, docker.DockerClient, ExitStack],
    repo: Repo,
    made: tuple[str, str, str | None],
    keep: bool,
    resumed: bool,
    unfinished: set[str],
) -> VolumeWorkspace:
    """Run `made[0]`'s workspace of `repo` on `at`'s target and engine: the repository's kept
    one (held as long as `at`'s stack, given back before its lock), if `keep` and on the local
    engine and no other run holds it, else the run's own; labelled with the image and runtime
    of the step that made it, `made[1:]` (`fks clean` exports it with them). `unfinished`: the
    names of the workspaces the run will have kept for --resume (`resumed`: it was resumed)."""
    (target, client, stack), (run_id, image, runtime) = at, made
    kept = None
    if keep and target.recorded_engine() is None:
        kept = kept_for_run(stack, repo, run_id, image, resumed=resumed)
    labels = {LABEL_RUN: run_id, LABEL_PID: str(os.getpid()), LABEL_REPO: str(repo.top)}
    labels = kept.labels(image) if kept is not None else labels
    if runtime:
        labels[LABEL_RUNTIME] = runtime
    name = kept.name if kept is not None else volume_name(run_id, repo.top)
    workspace = target.workspace(client, repo, name, labels, image)
    if kept is not None:
        workspace.base_index, workspace.lasting = kept.base_index, True
        stack.callback(lambda: kept.release(workspace, run_id, image, name in unfinished))
    return workspace


def _warm(target: Target, settings: SandboxSettings, step: Step) -> int:
    """With warm containers, the step's iterations (no more containers are made; a resumed
    step given more runs the rest cold); 0 (cold) for a step of one iteration (no next one),
    and where the target has none."""
    left = step.iterations if step.loop else 1
    return target.warm(left) if settings.warm is not False and left > 1 else 0
