"""`--sandbox`: every step in Docker containers on a workspace of its own (a Docker volume)
and its own branch, merged back into the base branch when it completes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import Notices, PreparedStep
from sandbox_runner.backends.docker.checks import is_loopback
from sandbox_runner.backends.docker.container import ContainerSettings, Mount
from sandbox_runner.backends.docker.egress import (
    SETTLE_S,
    SOCKET_DIR,
    ApiUpstream,
    Denied,
    EgressProxy,
    Refusals,
)
from sandbox_runner.backends.docker.export import WORKSPACE
from sandbox_runner.backends.docker.shipping import Placement, ShippedObjects, objects_volume_name
from sandbox_runner.backends.docker.swarm import PackServer, SwarmObjects, SwarmWorkspace
from sandbox_runner.backends.docker.workspace import (
    Synced,
    VolumeWorkspace,
    WorkspaceSandbox,
    remove_run_containers,
    remove_run_proxy_volumes,
    volume_name,
)
from sandbox_runner.errors import AgentNotFoundError, FksError, SandboxError, WorkspaceError
from sandbox_runner.git.bundles import apply_leftover, drop_run_refs
from sandbox_runner.git.landing import Landing, merge_back
from sandbox_runner.git.repo import (
    Repo,
    branch_exists,
    create_branch,
    current_branch,
    delete_branch,
    exclude_forge_dir,
    identity_env,
    leftover_ref,
    not_committed,
    open_repo,
    require_base,
    rev,
    step_branch,
)
from sandbox_runner.labels import LABEL_IMAGE, LABEL_PID, LABEL_REPO, LABEL_RUN, LABEL_STEP
from sandbox_runner.paths import inside_project
from sandbox_runner.plan.agents import AgentCommand, parse_claude_agent_path, resolve_agent
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.records.masking import CREDENTIAL_VARS
from sandbox_runner.records.reported import DeniedRecord
from sandbox_runner.records.results import IterationResult, StepOutcome
from sandbox_runner.records.store import (
    ActiveRun,
    IterationRecord,
    StepRecord,
    slug,
)
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

# Claude steps get the model API's credentials; other agents only what `sandbox.env` lists.
CLAUDE_ENV = (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL")
DEFAULT_MEMORY = "4g"
DEFAULT_PIDS_LIMIT = 4096
DEFAULT_TIMEOUT = 3600.0
ALLOWLIST = "allowlist"
DENIED_REPORTED = 10  # refused destinations named when a step ends; the rest summed in one line
OPEN = "open"
# The root filesystem is read-only: these (and the workspace) are where an agent may write.
TMPFS = {"/tmp": "rw,exec,mode=1777", "/home/fks": "rw,exec,mode=1777"}


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
    ) -> None:
        """`checked_base`: the caller has already checked `base` (fks forge: its own rules).
        `keep_interrupted`: keep an interrupted step's workspace for `--resume` (fks forge
        resumes from the task's branch in a new run, so it has no use for it)."""
        from sandbox_runner.backends.docker.engines import supported_engine
        from sandbox_runner.backends.docker.images import DEFAULT_AGENT_IMAGE

        self._engine = supported_engine(settings.engine)  # before anything is opened or started
        self._cwd = cwd
        self._agents = agents
        self._settings = settings
        self._image_default = DEFAULT_AGENT_IMAGE
        self._repo = open_repo(cwd)
        self._base = base if checked_base and base else require_base(self._repo, base)
        self._client: docker.DockerClient | None = None
        self._run: ActiveRun | None = None
        self._reporter: Notices | None = None
        self._workspaces: dict[Path, VolumeWorkspace] = {}
        self._proxies: dict[tuple[tuple[str, ...], bool], EgressProxy] = {}
        self._stack = ExitStack()
        """The run's egress proxies: started with the first step that needs one."""
        self._kept: set[str] = set()
        """Workspaces of interrupted steps: kept for --resume (and `fks clean`)."""
        self._users: dict[str, str | None] = {}
        """The user each image names (label fks.user), else None: the host's uid:gid."""
        self._devcontainer: str | None = None
        self._image_warnings: list[str] = []
        """Images that hold another fks or Claude Code than expected: said once per run."""
        self._keep_interrupted = keep_interrupted
        self._manager: str | None = None
        """On a swarm: the address its nodes reach this machine at (for the packs it serves)."""
        self._packs: PackServer | None = None

    # --- Backend protocol ---------------------------------------------------------------------

    @property
    def base_branch(self) -> str | None:
        return self._base

    def settings_for(self, agent: str) -> SandboxSettings:
        cfg = self._agents.get(agent)
        return self._settings.merged(cfg.sandbox if cfg else None)

    def resolve(self, step: Step) -> AgentCommand:
        """Check the agent the way the container will see it (paths inside the repository)."""
        target = (
            self._agents[step.agent].path
            if step.agent in self._agents and self._agents[step.agent].path
            else step.agent
        )
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
        s = self._settings
        limits = ", ".join(
            part
            for part in (
                f"memory {s.memory or DEFAULT_MEMORY}",
                f"cpus {s.cpus:g}" if s.cpus else "",
                f"pids {s.pids_limit or DEFAULT_PIDS_LIMIT}",
                f"timeout {s.timeout or DEFAULT_TIMEOUT:g}s per iteration",
            )
            if part
        )
        return [
            f"Sandbox: image {s.image or self._image_default}, network {network_mode(s)}, "
            f"user {os.getuid()}:{os.getgid()}, read-only root filesystem, {limits}",
            f"Each step runs on a new branch fks/<run-id>/<n>-<agent> from '{self._base}' "
            f"in a workspace of its own (a Docker volume at {WORKSPACE}), "
            f"merged into '{self._base}' when it completes",
        ]

    def planned_cwd(self, command: AgentCommand) -> str:
        _repo, _base, relative = self._step_repo(command)
        return f"{Path(WORKSPACE) / relative} (in the container)"

    def planned_network(self, step: Step, command: AgentCommand) -> str | None:
        settings = self.settings_for(step.agent)
        mode = network_mode(settings)
        api = " and the model API (key added by the proxy)" if command.stream_json else ""
        if mode == ALLOWLIST:
            allowed = ", ".join(settings.allow) or "nothing"
            return f"allowlist: {allowed}{api}; everything else refused"
        if mode == "none":
            return f"none: no network{api.replace(' and', ' but')}"
        return f"{mode}: any address the host reaches" if mode == OPEN else f"Docker network {mode}"

    def preflight(self, steps: list[Step]) -> None:
        """Before anything starts: Docker answers, every setting holds, images and agents exist."""
        from sandbox_runner.backends.docker.checks import (
            check_agents_in_image,
            check_api_url,
            check_engine,
            check_static,
        )
        from sandbox_runner.backends.docker.client import docker_client, ping
        from sandbox_runner.backends.docker.images import (
            image_user,
            require_image,
            stale_image_warning,
        )

        for step in steps:
            check_static(self.settings_for(step.agent), self._where(step.agent))
            self._check_committed(step)
            if self._engine is not None:
                self._check_remote(step)
            elif self.resolve(step).stream_json:
                network = _docker_network(self.settings_for(step.agent))
                check_api_url(os.environ.get("ANTHROPIC_BASE_URL"), network=network)
        if self._engine is None or self._swarm:
            self._client = docker_client()
            ping(self._client)
            if self._swarm:
                from sandbox_runner.backends.docker.swarm import manager_address

                self._manager = manager_address(self._client)
        else:
            from sandbox_runner.backends.docker.engines import engine_client

            self._client = engine_client(self._engine)
        programs: dict[str, set[str]] = {}
        for step in steps:
            settings = self.settings_for(step.agent)
            check_engine(self._client, settings, self._where(step.agent))
            image = self._image(settings)
            if image not in programs:
                self._present(image)
                require_image(self._client, image)
                if warning := stale_image_warning(self._client, image):
                    self._image_warnings.append(warning)
                self._users[image] = image_user(self._client, image)
            programs.setdefault(image, set()).add(self.resolve(step).program)
        for image, names in programs.items():
            check_agents_in_image(self._client, image, names)
        self._check_networks(steps)
        for step in steps:
            if self.resolve(step).stream_json and not any(os.environ.get(v) for v in CLAUDE_ENV):
                raise SandboxError(
                    f"step '{step.agent}' runs Claude in a container, which needs credentials from the host: "
                    "set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (or ANTHROPIC_BASE_URL for a gateway)"
                )

    def _check_committed(self, step: Step) -> None:
        """An agent given as a path in the repository runs from the step's workspace, which
        holds exactly the base's last commit: it must be in it."""
        agent = self.resolve(step)
        program = Path(agent.program)
        if agent.kind != "binary" or not program.is_absolute():
            return
        repo, base, _relative = self._step_repo(agent)
        if not program.is_relative_to(repo.top):
            return
        why = not_committed(repo, base, program)
        if why is not None:
            raise AgentNotFoundError(
                f"agent '{step.agent}' is not in the last commit of '{base}', and the sandbox's "
                f"workspace holds only what is: {why}"
            )

    @property
    def _swarm(self) -> bool:
        return self._engine is not None and self._engine.kind == "swarm"

    def _check_remote(self, step: Step) -> None:
        """What a remote engine cannot have: paths of this machine, a model API on it; and on a
        swarm, the egress proxy (not there yet)."""
        settings, where = self.settings_for(step.agent), self._where(step.agent)
        mode = network_mode(settings)
        if self._swarm and (
            mode == ALLOWLIST or (mode == "none" and self.resolve(step).stream_json)
        ):
            raise SandboxError(
                f"{where}.network: {mode} needs the egress proxy, which does not run on a swarm "
                "yet; set sandbox.network to open (or none for agents other than Claude)"
            )
        if settings.mounts:
            raise SandboxError(
                f"{where}.mounts: engine {self._engine} cannot see this machine's paths "
                f"({settings.mounts[0]}); remove sandbox.mounts or run on the local engine"
            )
        agent = self.resolve(step)
        if files := _config_files(agent):
            raise SandboxError(
                f"agent '{step.agent}': its Claude config file {files[0]} would be mounted from "
                f"this machine, which engine {self._engine} cannot see; run it on the local engine"
            )
        api = ApiUpstream.from_env(os.environ) if agent.stream_json else None
        if api is not None and is_loopback(api.host):
            raise SandboxError(
                f"ANTHROPIC_BASE_URL {api.url} is on this machine, which containers on engine "
                f"{self._engine} cannot reach; give an address that engine reaches"
            )

    def _present(self, image: str) -> None:
        """On a remote engine: the image as the local engine has it, sent there if it is not
        (by id: `fks image push`); an image only the remote engine has is used as it is."""
        if self._engine is None or self._swarm:  # a swarm's nodes: see `fks image push`
            return
        from sandbox_runner.backends.docker.client import docker_client
        from sandbox_runner.backends.docker.push import TRANSFER_TIMEOUT_S, push_image

        assert self._client is not None
        local = docker_client(timeout=TRANSFER_TIMEOUT_S)
        if not _has_image(local, image):
            return
        push_image(local, self._client, image, engine=self._engine, out=sys.stderr, quiet=True)

    def _image(self, settings: SandboxSettings) -> str:
        """The image's name; `devcontainer` is the repository's, built on first use."""
        from sandbox_runner.backends.docker.devcontainer import DEVCONTAINER, ensure_for_run

        if settings.image != DEVCONTAINER:
            return settings.image or self._image_default
        if self._devcontainer is None:
            self._devcontainer = ensure_for_run(self._repo.top, say=sys.stderr)
        return self._devcontainer

    def _where(self, agent: str) -> str:
        cfg = self._agents.get(agent)
        return f"agents.{agent}.sandbox" if cfg is not None and cfg.sandbox else "sandbox"

    def _check_networks(self, steps: list[Step]) -> None:
        assert self._client is not None
        wanted = {network_mode(self.settings_for(s.agent)) for s in steps}
        if wanted & {ALLOWLIST, "none"}:
            from sandbox_runner.backends.docker.images import DEFAULT_PROXY_IMAGE, require_image

            self._present(DEFAULT_PROXY_IMAGE)
            require_image(self._client, DEFAULT_PROXY_IMAGE)
        for network in wanted - {ALLOWLIST, OPEN, "none", "host"}:
            if not self._client.networks.list(names=[network]):
                raise SandboxError(
                    f"sandbox network '{network}' does not exist; create it ('docker network create {network}') or use bridge/none"
                )

    @property
    def _writer(self) -> ActiveRun:
        assert self._run is not None, "session() first"
        return self._run

    @contextmanager
    def session(self, run: ActiveRun, reporter: Notices) -> Iterator[None]:
        self._run, self._reporter = run, reporter
        for warning in dict.fromkeys(self._image_warnings):
            reporter.warn(warning)
        run.set_base(self._base, rev(self._repo, self._base))
        if self._engine is not None:
            run.set_engine(str(self._engine))
        exclude_forge_dir(self._repo.top)
        assert self._client is not None, "preflight() first"
        # A resumed run's killed process may have left its containers running: stop them first.
        remove_run_containers(self._client, run.record.id)
        remove_run_proxy_volumes(self._client, run.record.id)
        if self._manager is not None:
            self._packs = self._stack.enter_context(PackServer(self._manager))
        try:
            with self._stack:
                yield
        finally:
            with deferred_signals():
                if self._swarm:
                    self._leave_swarm(run.record.id)
                done = [w for w in self._workspaces.values() if w.name not in self._kept]
                for workspace in done:
                    drop_run_refs(workspace.repo, run.record.id)
                self._remove_workspaces(done)

    def _remove_workspaces(self, done: list[VolumeWorkspace]) -> None:
        """The run's finished workspaces: on the local engine removed in the background (Docker
        takes seconds to delete a large checkout); elsewhere, with what was shipped there, now."""
        from sandbox_runner.backends.docker.reaper import remove_in_background

        local = self._engine is None and all(w.shipped is None for w in done)
        if local and remove_in_background([w.name for w in done]):
            return
        for workspace in done:
            workspace.remove()

    def _leave_swarm(self, run_id: str) -> None:
        """The run's services, and its volumes on every node (a swarm keeps no workspace for
        --resume: a resumed step starts afresh from its branch, on any node)."""
        from sandbox_runner.backends.docker.images import DEFAULT_AGENT_IMAGE
        from sandbox_runner.backends.docker.service import remove_run_services
        from sandbox_runner.backends.docker.swarm import sweep_volumes

        assert self._client is not None
        remove_run_services(self._client, run_id)
        image = next(iter(self._users), DEFAULT_AGENT_IMAGE)
        try:
            sweep_volumes(self._client, [f"{LABEL_RUN}={run_id}"], image)
        except FksError as exc:
            if self._reporter is not None:
                self._reporter.warn(f"could not remove the run's volumes on the swarm: {exc}")
        self._kept.clear()

    def review_hint(self, record: StepRecord) -> list[str]:
        if not record.branch or record.merged:
            return []
        repo = Path(record.repo or self._repo.top)
        base = record.base_branch or self._base
        lines = [f"Branch kept for review: {record.branch}"]
        if record.conflicts:
            lines.append(f"It conflicts with '{base}' in: {', '.join(record.conflicts)}")
        lines.append(f"  git -C {repo} log --stat {base}..{record.branch}")
        if self._run is not None:
            lines.append(f"  fks review {self._run.record.id}")
        if record.workspace and record.workspace in self._kept:
            lines.append(
                f"Workspace kept for --resume: Docker volume {record.workspace} (fks clean commits "
                "what is uncommitted in it to the branch, then removes it)"
            )
        return lines

    # --- one step -----------------------------------------------------------------------------

    def _step_repo(self, agent: AgentCommand) -> tuple[Repo, str, Path]:
        """The repository a step works in, its base branch, and the agent's directory in it."""
        if agent.kind == "claude-agent" and agent.project is not None:
            repo = open_repo(agent.project, what=f"--sandbox (agent '{agent.name}')")
            if repo.common_dir != self._repo.common_dir:
                base = current_branch(repo.top)
                if base is None:
                    raise WorkspaceError(
                        f"HEAD is detached in {repo.top} (agent '{agent.name}'); check out a branch there"
                    )
                require_base(repo, base)
                exclude_forge_dir(repo.top)
                return repo, base, agent.project.relative_to(repo.top)
            return self._repo, self._base, agent.project.relative_to(self._repo.top)
        return self._repo, self._base, self._cwd.relative_to(self._repo.top)

    def _workspace(self, repo: Repo, image: str) -> VolumeWorkspace:
        assert self._run is not None and self._client is not None
        run_id = self._run.record.id
        if repo.top not in self._workspaces:
            labels = {LABEL_RUN: run_id, LABEL_PID: str(os.getpid()), LABEL_REPO: str(repo.top)}
            name = volume_name(run_id, repo.top)
            if self._packs is not None:  # on a swarm node, placed by Swarm
                self._workspaces[repo.top] = SwarmWorkspace(
                    self._client,
                    repo,
                    name,
                    {**labels, LABEL_IMAGE: image},
                    shipped=SwarmObjects(
                        self._client,
                        repo,
                        objects_volume_name(name),
                        image=image,
                        labels=labels,
                        server=self._packs,
                        placement=Placement(),
                    ),
                )
                return self._workspaces[repo.top]
            shipped = None
            if self._engine is not None:  # it cannot see the user's objects: they are sent
                shipped = ShippedObjects(
                    self._client, repo, objects_volume_name(name), image=image, labels=labels
                )
            self._workspaces[repo.top] = VolumeWorkspace(
                self._client, repo, name, {**labels, LABEL_IMAGE: image}, shipped=shipped
            )
        return self._workspaces[repo.top]

    def _container_agent(self, host_view: AgentCommand, repo: Repo, relative: Path) -> AgentCommand:
        """The agent as the container sees it: in the workspace, config files from the project."""
        workdir = Path(WORKSPACE) / relative
        agent = replace(host_view, cwd=workdir)
        if host_view.kind == "claude-agent":
            agent = replace(agent, project=workdir)
        elif host_view.kind == "binary" and Path(host_view.program).is_absolute():
            program = Path(host_view.program)
            if program.is_relative_to(repo.top):
                agent = replace(agent, program=str(Path(WORKSPACE) / program.relative_to(repo.top)))
        # Claude config files are read from the user's project, mounted read-only where they are.
        return replace(agent, config_root=self._cwd)

    def _egress(
        self, agent: AgentCommand, settings: SandboxSettings, repo: Repo
    ) -> EgressProxy | None:
        """The run's egress proxy this step goes out through (None: the network is as set)."""
        assert self._run is not None and self._client is not None
        mode, claude = network_mode(settings), agent.stream_json
        if mode != ALLOWLIST and not (mode == "none" and claude):
            return None
        allow = tuple(settings.allow) if mode == ALLOWLIST else ()
        api = ApiUpstream.from_env(os.environ) if claude else None
        # Steps without the model API get a proxy without it: its socket would be a way to the key.
        key = (allow, api is not None)
        if key not in self._proxies:
            proxy = EgressProxy(
                self._client,
                run_id=self._run.record.id,
                allow=[AllowEntry.parse(entry) for entry in allow],
                api=api,
                labels={LABEL_REPO: str(repo.top)},
                # Only the proxy resolves names: a local gateway's, and allowed host services.
                extra_hosts={"host.docker.internal": "host-gateway"},
            )
            self._proxies[key] = self._stack.enter_context(proxy)
        return self._proxies[key]

    def _env(self, agent: AgentCommand, settings: SandboxSettings, repo: Repo) -> dict[str, str]:
        """Credentials only for Claude steps (and agents that list them in `sandbox.env`)."""
        names = [*settings.env, *(CLAUDE_ENV if agent.stream_json else ())]
        env = {name: os.environ[name] for name in names if name in os.environ}
        env.update(identity_env(repo))
        return env

    @contextmanager
    def step(self, index: int, step: Step, record: StepRecord) -> Iterator[PreparedStep]:
        assert self._run is not None and self._client is not None, "preflight() and session() first"
        run_id = self._run.record.id
        host_view = self.resolve(step)
        repo, base, relative = self._step_repo(host_view)
        settings = self.settings_for(step.agent)
        image = self._image(settings)
        workspace = self._workspace(repo, image)
        resumed = record.branch is not None
        branch = record.branch or step_branch(run_id, index, slug(step.agent))
        self._start_branch(record, repo, base, branch, workspace, resumed=resumed)
        with _dropped_on_early_failure(repo, branch, record, resumed=resumed):
            agent = self._container_agent(host_view, repo, relative)
            env = self._env(agent, settings, repo)
            mounts, user = self._mounts(agent, settings, workspace), self._users.get(image)
            container = container_settings(
                image, mounts, _labels(run_id, index, repo), settings, user
            )
            proxy = self._egress(agent, settings, repo)
            if proxy is not None:
                container, env = _through_proxy(proxy, container, env, settings.env)
            with tempfile.TemporaryDirectory(prefix="fks-export-") as scratch:
                sandbox = WorkspaceSandbox(
                    self._client,
                    container,
                    workspace,
                    branch=branch,
                    leftover=leftover_ref(run_id, index),
                    scratch=Path(scratch),
                    new_step=not resumed,
                    warm=self._warm(settings, step),
                )
                if resumed and workspace.exists():
                    self._salvage(sandbox, env, record, interrupted=False)
                workspace.ensure()
                self._kept.discard(workspace.name)
                try:
                    with closing(sandbox):
                        yield PreparedStep(
                            agent=agent,
                            sandbox=sandbox,
                            env=env,
                            timeout=settings.timeout or DEFAULT_TIMEOUT,
                            after_iteration=lambda result: self._after_iteration(
                                sandbox, env, result, proxy
                            ),
                            land=lambda outcome: self._land(
                                index, step, record, sandbox, outcome, proxy
                            ),
                        )
                except BaseException as exc:
                    if isinstance(exc, Exception) and not resumed and not record.iterations:
                        raise  # failed before its first iteration: nothing is kept
                    # Interrupted or failed mid-step: keep what the agent committed so far, and its
                    # workspace as it is (for --resume).
                    if self._keep_interrupted:
                        self._kept.add(workspace.name)
                    with deferred_signals():
                        self._salvage(sandbox, env, record, interrupted=True)
                    raise

    def _warm(self, settings: SandboxSettings, step: Step) -> int:
        """With warm containers, the step's iterations (no more containers are made; a resumed
        step given more runs the rest cold); 0 (cold) for a step of one iteration (no next
        one), and on a swarm."""
        left = step.iterations if step.loop else 1
        return left if settings.warm is not False and left > 1 and not self._swarm else 0

    def _start_branch(
        self,
        record: StepRecord,
        repo: Repo,
        base: str,
        branch: str,
        workspace: VolumeWorkspace,
        *,
        resumed: bool,
    ) -> None:
        """Create the step branch at the base's tip (a resumed step keeps its own)."""
        start_commit = None if resumed else rev(repo, base)
        if start_commit is not None:
            create_branch(repo, branch, start_commit)
        elif record.start_commit and not branch_exists(repo.top, branch):
            # `fks clean --branches` removed it because it held no commit: start it again.
            create_branch(repo, branch, record.start_commit)
        self._writer.bind_branch(
            record,
            repo=str(repo.top),
            base=base,
            branch=branch,
            workspace=workspace.name,
            start_commit=start_commit,
        )

    def _mounts(
        self, agent: AgentCommand, settings: SandboxSettings, workspace: VolumeWorkspace
    ) -> list[Mount]:
        """The step's workspace volume, `sandbox.mounts` and the Claude config files, read-only."""
        mounts = workspace.mounts() + [Mount(source=m, read_only=True) for m in settings.mounts]
        mounts += [
            Mount(
                source=str(inside_project(f, "Claude config file")), target=str(f), read_only=True
            )
            for f in _config_files(agent)
        ]
        return mounts

    def _salvage(
        self,
        sandbox: WorkspaceSandbox,
        env: dict[str, str],
        record: StepRecord,
        *,
        interrupted: bool,
    ) -> None:
        """Import the commits a workspace holds that its branch has not got yet: those of the
        iteration just stopped (`interrupted`), or those a killed run had not saved."""
        assert record.branch is not None
        repo = sandbox.workspace.repo
        whose = "the stopped iteration" if interrupted else "the killed run"
        before = _safe_rev(repo, record.branch)
        try:
            sandbox.export_now(env)
            synced = sandbox.sync(env)
        except FksError as exc:
            synced = Synced(error=str(exc))
        if synced.error and self._reporter is not None:
            self._reporter.warn(f"could not save the commits of {whose}: {synced.error}")
        self._writer.set_head(record, _safe_rev(repo, record.branch))
        if self._reporter is None:
            return
        if record.head_commit != before:
            saved = "Saved the commits of" if interrupted else "Kept the commits"
            self._reporter.info(
                f"{saved} {whose}{'' if interrupted else ' had not saved yet'} on {record.branch}"
            )
        if interrupted and _safe_rev(repo, sandbox.leftover) is not None:
            self._reporter.info(
                "The files it left uncommitted stay in its workspace: fks run --resume goes on "
                f"with them, fks clean commits them to {record.branch}"
            )

    def _after_iteration(
        self,
        sandbox: WorkspaceSandbox,
        env: dict[str, str],
        result: IterationResult,
        proxy: EgressProxy | None,
    ) -> IterationResult:
        synced = sandbox.sync(env)
        if proxy is not None:  # what arrives later is the next iteration's (or see _land)
            refused = proxy.take_denied()
            result = replace(
                result,
                denied=tuple(
                    DeniedRecord(host=d.host, port=d.port, count=d.count) for d in refused.listed
                ),
                denied_more=refused.more,
            )
        for warning in synced.warnings:
            if self._reporter is not None:
                self._reporter.warn(warning)
        if synced.error is not None:
            note = f"Iteration {result.number}: {synced.error}; '{self._base}' was not touched"
            return replace(
                result,
                complete=False,
                marker=False,
                reason="export_failed",
                note=note,
                changed=None,
            )
        return replace(result, changed=synced.changed)

    def _land(
        self,
        index: int,
        step: Step,
        record: StepRecord,
        sandbox: WorkspaceSandbox,
        outcome: StepOutcome,
        proxy: EgressProxy | None,
    ) -> StepOutcome:
        """Once the loop ended: commit what was left uncommitted, then merge a complete step."""
        assert (
            self._run is not None and record.branch is not None and record.base_branch is not None
        )
        repo, branch, base, run_id = (
            sandbox.workspace.repo,
            record.branch,
            record.base_branch,
            self._run.record.id,
        )
        identity = identity_env(repo)
        message = f"fks: commit what {step.agent} left uncommitted (run {run_id}, step {index})"
        if proxy is not None and record.iterations:
            self._late_refusals(record.iterations[-1], proxy)
        self._report_denied(record)
        leftover = apply_leftover(repo, branch, sandbox.leftover, message, identity)
        if leftover and self._reporter is not None:
            self._reporter.info(f"Committed work {step.agent} left uncommitted ({leftover[:12]})")
        self._writer.set_head(record, rev(repo, branch))
        if not outcome.complete:
            return outcome
        landing = merge_back(
            repo, base, branch, f"fks: merge step {index} ({step.agent}) of run {run_id}", identity
        )
        self._writer.record_landing(record, landing)
        return self._report_landing(landing, branch, base, outcome)

    def _late_refusals(self, last: IterationRecord, proxy: EgressProxy) -> None:
        """Refusals whose log lines arrived after the last iteration's take: its own. Taken
        once SETTLE_S has passed since it ended (a wait per step, not per iteration)."""
        ended = last.ended.timestamp() if last.ended is not None else None
        late = proxy.take_denied(settled_at=None if ended is None else ended + SETTLE_S)
        if not late.listed and not late.more:
            return
        kept = Refusals(
            tuple(Denied(d.host, d.port, d.count) for d in last.denied), last.denied_more
        )
        both = kept.plus(late)
        self._writer.set_denied(
            last,
            [DeniedRecord(host=d.host, port=d.port, count=d.count) for d in both.listed],
            both.more,
        )

    def _report_denied(self, record: StepRecord) -> None:
        """One line per refused destination, with the option that would allow it: the
        DENIED_REPORTED most refused, then one line for the rest."""
        if self._reporter is None:
            return
        counts: Counter[tuple[str, int | None]] = Counter()
        more = 0
        for it in record.iterations:
            more += it.denied_more
            for d in it.denied:
                counts[(d.host, d.port)] += d.count
        ordered = sorted(counts.items(), key=lambda item: -item[1])
        for (host, port), count in ordered[:DENIED_REPORTED]:
            entry = host if port in (None, 80, 443) else f"{host}:{port}"
            line = DeniedRecord(host=host, port=port, count=count).describe()
            verb = "was" if count == 1 else "were"
            self._reporter.warn(f"{line} {verb} denied; allow with --allow {entry}")
        more += sum(count for _, count in ordered[DENIED_REPORTED:])
        if more:
            run_id = self._run.record.id if self._run is not None else "last"
            self._reporter.warn(
                f"{more} more request{'s were' if more != 1 else ' was'} denied, to other "
                f"destinations (the most refused of each iteration: fks show {run_id})"
            )

    def _report_landing(
        self, landing: Landing, branch: str, base: str, outcome: StepOutcome
    ) -> StepOutcome:
        reporter = self._reporter
        if landing.conflicts:
            if reporter is not None:
                reporter.info(
                    f"Not merged: {branch} conflicts with '{base}' in "
                    f"{', '.join(landing.conflicts)}; '{base}' left untouched"
                )
            return replace(outcome, complete=False, reason="merge_conflict")
        if landing.blocked:
            if reporter is not None:
                run = self._run.record.id if self._run is not None else "last"
                reporter.info(
                    f"Not merged: could not update '{base}' with {branch}: {landing.blocked}, then "
                    f"continue with: fks run --resume {run} (or: git merge {branch})"
                )
            return replace(outcome, complete=False, reason="merge_blocked")
        if reporter is not None and landing.nothing_new:
            reporter.info(f"Nothing new on {branch} to merge into '{base}'")
        elif reporter is not None and landing.commit:
            how = "fast-forward" if landing.fast_forward else "merge commit"
            reporter.info(f"Merged {branch} into '{base}' ({how}, now {landing.commit[:12]})")
        return outcome


@contextmanager
def _dropped_on_early_failure(
    repo: Repo, branch: str, record: StepRecord, *, resumed: bool
) -> Iterator[None]:
    """A new step's branch is deleted again if the step fails before its first iteration
    (preparing its workspace, its proxy, or starting its agent): nothing is left of it."""
    try:
        yield
    except Exception:
        if not resumed and not record.iterations:
            delete_branch(repo, branch)
        raise


def _through_proxy(
    proxy: EgressProxy, container: ContainerSettings, env: dict[str, str], listed: Sequence[str]
) -> tuple[ContainerSettings, dict[str, str]]:
    """No network of its own: the proxy's sockets, its forwarders, a placeholder credential
    (credentials the agent lists in `sandbox.env` it gets: its choice)."""
    socket = Mount(source=proxy.volume_name, target=SOCKET_DIR, read_only=True, volume=True)
    container = replace(
        container,
        network="none",
        mounts=[*container.mounts, socket],
        entry=tuple(proxy.wrap_argv([])),
        join_entry=tuple(proxy.wait_argv([])),
    )
    env = {k: v for k, v in env.items() if k not in CLAUDE_ENV or k in listed}
    return container, {**proxy.env(), **env}


def network_mode(settings: SandboxSettings) -> str:
    """`allowlist` (the default), `open` (`bridge` is the same), `none`, or a network's name."""
    mode = settings.network or ALLOWLIST
    return OPEN if mode == "bridge" else mode


def _docker_network(settings: SandboxSettings) -> str:
    mode = network_mode(settings)
    return "bridge" if mode == OPEN else "none" if mode == ALLOWLIST else mode


def container_settings(
    image: str,
    mounts: list[Mount],
    labels: dict[str, str],
    settings: SandboxSettings | None = None,
    user: str | None = None,
) -> ContainerSettings:
    """The hardened container of every sandbox iteration (and of `fks clean`'s exports); it
    runs as your uid:gid unless the image names its user (a devcontainer's remoteUser)."""
    from sandbox_runner.backends.docker.images import DEFAULT_AGENT_IMAGE

    settings = settings or SandboxSettings()
    return ContainerSettings(
        image=image or DEFAULT_AGENT_IMAGE,
        user=user or f"{os.getuid()}:{os.getgid()}",
        mounts=mounts,
        network=_docker_network(settings),
        memory=settings.memory or DEFAULT_MEMORY,
        cpus=settings.cpus,
        pids_limit=settings.pids_limit or DEFAULT_PIDS_LIMIT,
        labels=labels,
        tmpfs=TMPFS,
    )


def _config_files(agent: AgentCommand) -> list[Path]:
    cfg = agent.config
    if cfg is None or agent.kind != "claude":
        return []
    root = agent.config_root or agent.cwd
    return [root / ref for ref in (cfg.mcp_config, cfg.settings) if ref]


def _has_image(client: docker.DockerClient, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


def _safe_rev(repo: Repo, ref: str) -> str | None:
    try:
        return rev(repo, ref)
    except WorkspaceError:
        return None


def _labels(run_id: str, index: int, repo: Repo) -> dict[str, str]:
    """What `fks clean` and resume find a step's containers by."""
    return {
        LABEL_RUN: run_id,
        LABEL_STEP: str(index),
        LABEL_PID: str(os.getpid()),
        LABEL_REPO: str(repo.top),
    }
