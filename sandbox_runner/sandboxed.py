"""`--sandbox`: every step in Docker containers on its own git worktree and branch, merged back
into the base branch when it completes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.agents import AgentCommand, parse_claude_agent_path, resolve_agent
from sandbox_runner.backend import PreparedStep
from sandbox_runner.config import AgentConfig, SandboxSettings
from sandbox_runner.dsl import Step
from sandbox_runner.errors import SandboxError, WorkspaceError
from sandbox_runner.loop import IterationResult, StepOutcome
from sandbox_runner.masking import CREDENTIAL_VARS
from sandbox_runner.output import Reporter
from sandbox_runner.progress import workspace_fingerprint
from sandbox_runner.sandbox.docker import (
    LABEL_PID,
    LABEL_REPO,
    LABEL_RUN,
    LABEL_STEP,
    ContainerSettings,
    DockerSandbox,
    Mount,
)
from sandbox_runner.store import ActiveRun, StepRecord, slug
from sandbox_runner.workspace import (
    Repo,
    RunWorktree,
    Staging,
    commit_leftovers,
    current_branch,
    exclude_forge_dir,
    identity_env,
    merge_back,
    open_repo,
    require_base,
    rev,
    salvage_staging,
    step_branch,
)

if TYPE_CHECKING:
    import docker

PASSED_ENV = (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL")


class SandboxBackend:
    """Steps in containers, each on a worktree branch of its repository."""

    def __init__(
        self,
        *,
        cwd: Path,
        agents: dict[str, AgentConfig],
        settings: SandboxSettings,
        base: str | None,
    ) -> None:
        from sandbox_runner.images import DEFAULT_AGENT_IMAGE

        self._cwd = cwd
        self._agents = agents
        self._settings = settings
        self._image_default = DEFAULT_AGENT_IMAGE
        self._repo = open_repo(cwd)
        self._base = require_base(self._repo, base)
        self._client: docker.DockerClient | None = None
        self._run: ActiveRun | None = None
        self._reporter: Reporter | None = None
        self._worktrees: dict[Path, RunWorktree] = {}
        self._to_remove: set[Path] = set()

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
                f"memory {s.memory}" if s.memory else "",
                f"cpus {s.cpus:g}" if s.cpus else "",
                f"pids {s.pids_limit}" if s.pids_limit else "",
                f"timeout {s.timeout:g}s per iteration" if s.timeout else "",
            )
            if part
        )
        return [
            f"Sandbox: image {s.image or self._image_default}, network {s.network or 'bridge'}, "
            f"user {os.getuid()}:{os.getgid()}" + (f", {limits}" if limits else ""),
            f"Each step runs on a new branch fks/<run-id>/<n>-<agent> from '{self._base}' "
            f"in {self._repo.top}/.forge/worktrees/<run-id>, merged into '{self._base}' when it completes",
        ]

    def planned_cwd(self, command: AgentCommand) -> str:
        repo, _base, relative = self._step_repo(command)
        inside = repo.top / ".forge" / "worktrees" / "<run-id>" / relative
        return f"{inside} (in the container)"

    def preflight(self, steps: list[Step]) -> None:
        """Before anything starts: Docker answers, the images exist, credentials are there."""
        from sandbox_runner.images import docker_client, require_image
        from sandbox_runner.sandbox.docker import ping

        self._client = docker_client()
        ping(self._client)
        for image in {self.settings_for(s.agent).image or self._image_default for s in steps}:
            require_image(self._client, image)
        for network in {self.settings_for(s.agent).network or "bridge" for s in steps} - {
            "bridge",
            "none",
            "host",
        }:
            if not self._client.networks.list(names=[network]):
                raise SandboxError(
                    f"sandbox network '{network}' does not exist; create it ('docker network create {network}') or use bridge/none"
                )
        for step in steps:
            if self.resolve(step).stream_json and not any(
                os.environ.get(v) for v in (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL")
            ):
                raise SandboxError(
                    f"step '{step.agent}' runs Claude in a container, which needs credentials from the host: "
                    "set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (or ANTHROPIC_BASE_URL for a gateway)"
                )

    @contextmanager
    def session(self, run: ActiveRun, reporter: Reporter) -> Iterator[None]:
        self._run, self._reporter = run, reporter
        run.record.base_branch = self._base
        run.record.base_commit = rev(self._repo, self._base)
        run.save()
        exclude_forge_dir(self._repo.top)
        try:
            yield
        finally:
            for path in list(self._to_remove):
                self._worktrees[path].remove()
            self._to_remove.clear()

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
        if record.worktree and Path(record.worktree).exists():
            lines.append(f"Worktree kept: {record.worktree}")
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

    @contextmanager
    def step(self, index: int, step: Step, record: StepRecord) -> Iterator[PreparedStep]:
        assert self._run is not None and self._client is not None, "preflight() and session() first"
        run_id = self._run.record.id
        host_view = self.resolve(step)
        repo, base, relative = self._step_repo(host_view)
        worktree = self._worktrees.setdefault(repo.top, RunWorktree(repo, run_id))
        resumed = record.branch is not None
        branch = record.branch or step_branch(run_id, index, slug(step.agent))
        start = None if resumed else rev(repo, base)
        path = worktree.check_out(branch, start)
        self._to_remove.discard(repo.top)
        record.repo, record.base_branch, record.branch = str(repo.top), base, branch
        record.worktree = str(path)
        record.start_commit = record.start_commit or start or rev(repo, branch)
        self._run.save()

        workdir = path / relative
        settings = self.settings_for(step.agent)
        staging = Staging(
            repo, worktree, branch, repo.top / ".forge" / "sandbox" / run_id / str(index)
        )
        if (
            resumed
            and staging.root.is_dir()
            and salvage_staging(repo, staging.root, branch)
            and self._reporter
        ):
            self._reporter.info(f"Kept the commits the killed run had not saved yet on {branch}")
        staging.prepare()
        if host_view.kind == "claude-agent":
            agent = replace(host_view, cwd=workdir, project=workdir)
        else:
            agent = resolve_agent(
                step.agent,
                agents=self._agents,
                cwd=workdir,
                on_host=False,
                visible=[Path(m) for m in settings.mounts],
            )
        # Claude config files are read from the user's project, mounted read-only where they are.
        agent = replace(agent, config_root=self._cwd)
        extra = [Mount(source=m, read_only=True) for m in settings.mounts]
        extra += [Mount(source=str(f), read_only=True) for f in _config_files(agent)]
        mounts = [
            Mount(source=src, target=dst, read_only=ro) for src, dst, ro in staging.mounts()
        ] + extra
        identity = identity_env(repo)
        env = {
            name: os.environ[name] for name in (*PASSED_ENV, *settings.env) if name in os.environ
        }
        env.update(identity)
        env.update(staging.env())
        labels = {
            LABEL_RUN: run_id,
            LABEL_STEP: str(index),
            LABEL_PID: str(os.getpid()),
            LABEL_REPO: str(repo.top),
        }
        sandbox = DockerSandbox(
            self._client,
            ContainerSettings(
                image=settings.image or self._image_default,
                user=f"{os.getuid()}:{os.getgid()}",
                mounts=mounts,
                network=settings.network or "bridge",
                memory=settings.memory,
                cpus=settings.cpus,
                pids_limit=settings.pids_limit,
                labels=labels,
            ),
        )
        reporter = self._reporter

        def after_iteration(result: IterationResult) -> IterationResult:
            for warning in staging.sync():
                if reporter is not None:
                    reporter.warn(warning)
            staging.prepare()
            return result

        def land(outcome: StepOutcome) -> StepOutcome:
            record.head_commit = rev(repo, branch)
            if not outcome.complete:
                return outcome
            message = f"fks: commit what {step.agent} left uncommitted (run {run_id}, step {index})"
            leftover = commit_leftovers(path, message, identity)
            if leftover and reporter is not None:
                reporter.info(f"Committed work {step.agent} left uncommitted ({leftover[:12]})")
            record.head_commit = rev(repo, branch)
            landing = merge_back(
                repo,
                base,
                branch,
                f"fks: merge step {index} ({step.agent}) of run {run_id}",
                identity,
            )
            record.merged = landing.merged
            record.merge_commit = landing.commit if landing.merged else None
            record.conflicts = list(landing.conflicts)
            if landing.conflicts:
                if reporter is not None:
                    reporter.warn(
                        f"{branch} conflicts with '{base}' in {', '.join(landing.conflicts)}; '{base}' left untouched"
                    )
                return replace(outcome, complete=False, reason="merge_conflict")
            if landing.blocked:
                if reporter is not None:
                    reporter.warn(f"could not update '{base}' with {branch}: {landing.blocked}")
                return replace(outcome, complete=False, reason="merge_blocked")
            if reporter is not None and landing.commit:
                how = "fast-forward" if landing.fast_forward else "merge commit"
                reporter.info(f"Merged {branch} into '{base}' ({how}, now {landing.commit[:12]})")
            return outcome

        try:
            yield PreparedStep(
                agent=agent,
                sandbox=sandbox,
                env=env,
                labels={},
                timeout=settings.timeout,
                progress=lambda: workspace_fingerprint(path),
                after_iteration=after_iteration,
                land=land,
            )
        except BaseException:
            # Interrupted or failed mid-step: keep what the agent committed so far, and the
            # worktree and branch as they are.
            try:
                staging.sync()
            except WorkspaceError as exc:
                if reporter is not None:
                    reporter.warn(f"could not save the interrupted iteration's commits: {exc}")
            record.head_commit = _safe_rev(repo, branch)
            raise
        finally:
            staging.remove()
        record.worktree = None
        if record.merged:
            self._to_remove.add(repo.top)  # recycled by the next step, removed at the end
        else:
            worktree.remove()


def _config_files(agent: AgentCommand) -> list[Path]:
    cfg = agent.config
    if cfg is None or agent.kind != "claude":
        return []
    root = agent.config_root or agent.cwd
    return [root / ref for ref in (cfg.mcp_config, cfg.settings) if ref]


def _safe_rev(repo: Repo, ref: str) -> str | None:
    try:
        return rev(repo, ref)
    except WorkspaceError:
        return None
