"""A step's workspace: a Docker volume holding a git repository, and the `Sandbox` that runs
iterations in it and brings their commits home as data.

The volume is mounted at /workspace; its repository borrows the user's objects (mounted
read-only at /fks/objects) as an alternate, so preparing it costs only the files a step
checks out, and a run's later steps recycle it (a checkout rewrites only the files that
differ). The user's `.git` itself is never mounted. After each iteration the host reads the
container's export (see `export.py`) and takes its bundle, every object fsck'ed, into the step
branch and nothing else.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecResult, ExecSpec, Execution, Stream
from sandbox_runner.backends.docker.client import (
    ensure_volume,
    remove_volume,
    volume_exists,
)
from sandbox_runner.backends.docker.runners.container import (
    ContainerSettings,
    DockerExecution,
    DockerSandbox,
    Mount,
)
from sandbox_runner.backends.docker.runners.warm import WarmDockerSandbox
from sandbox_runner.backends.docker.workspace.export import (
    OBJECTS,
    WORKSPACE,
    Export,
    ExportError,
    LoggedBundle,
    PreparedLine,
    ReportFilter,
    max_bundle_bytes,
    read_export,
    wrapped,
)
from sandbox_runner.backends.docker.workspace.shipping import Placement, ShippedObjects
from sandbox_runner.errors import AgentNotFoundError
from sandbox_runner.git.bundles import import_bundle
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import GitError, git

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.runners.service import ServiceSandbox


def volume_name(run_id: str, repo_top: Path) -> str:
    digest = hashlib.sha256(str(repo_top).encode()).hexdigest()[:10]
    return f"fks-ws-{run_id}-{digest}"


class VolumeWorkspace:
    """The Docker volume a run's steps in one repository work in."""

    def __init__(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: Mapping[str, str],
        *,
        shipped: ShippedObjects | None = None,
    ) -> None:
        """`shipped`: on an engine that cannot see this machine's disk, the volume that holds
        the objects fks sent it, in place of the user's (see `shipping.py`)."""
        self._client = client
        self.repo = repo
        self.name = name
        self._labels = dict(labels)
        self.shipped = shipped
        self.placement: Placement | None = None
        """On a swarm: the node its volumes are on (services are pinned there)."""
        self.base_index: str | None = None
        """What the last checkout in the volume reported of its base index (`<inode>:<ctime>:<size>`,
        see `iteration.sh`), taken from a container before its agent started; None: unknown
        (a new volume, or one this process did not check out), so a new step checks out in full."""

    def exists(self) -> bool:
        return volume_exists(self._client, self.name)

    def ensure(self) -> None:
        ensure_volume(self._client, self.name, self._labels)
        if self.shipped is not None:
            self.shipped.ensure()

    def provide(self, commit: str) -> None:
        """Make `commit` readable at /fks/objects (the user's objects locally: always)."""
        if self.shipped is not None:
            self.shipped.provide(commit)

    def mounts(self) -> list[Mount]:
        objects = (
            self.shipped.mount()
            if self.shipped is not None
            else Mount(source=str(self.repo.objects), target=OBJECTS, read_only=True)
        )
        return [Mount(source=self.name, target=WORKSPACE, volume=True), objects]

    def remove(self) -> None:
        remove_volume(self._client, self.name)
        if self.shipped is not None:
            self.shipped.remove()

    def relocate(self) -> None:
        """Its node went down (a swarm's workspaces only)."""
        raise NotImplementedError


def remove_run_containers(client: docker.DockerClient, run_id: str) -> int:
    """Stop and remove every container of run `run_id` (a killed process may have left some)."""
    import docker.errors

    from sandbox_runner.labels import LABEL_RUN

    count = 0
    listed = client.containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={run_id}"}, ignore_removed=True
    )
    for container in listed:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress
                raise
        count += 1
    return count


def remove_run_proxy_volumes(client: docker.DockerClient, run_id: str) -> None:
    """The socket volumes of run `run_id`'s egress proxies (a killed process leaves them)."""
    from sandbox_runner.labels import LABEL_ROLE, LABEL_RUN

    wanted = [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}=egress-proxy"]
    for volume in client.volumes.list(filters={"label": wanted}):
        remove_volume(client, volume.name)


def start_of(repo: Repo, branch: str) -> tuple[str, str]:
    """The branch's commit and its tree, in one git call."""
    found = git(repo.top, "rev-parse", "--revs-only", f"{branch}^{{commit}}", f"{branch}^{{tree}}")
    ids = found.split()
    if len(ids) != 2:
        raise GitError(f"branch {branch} has no commit")
    return ids[0], ids[1]


@dataclass
class Synced:
    """What the host took from an iteration."""

    changed: bool | None = None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the iteration's work could not be taken (the step branch did not move)."""


class WorkspaceSandbox:
    """Runs a step's iterations in containers on its workspace; `sync` imports their commits."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        settings: ContainerSettings,
        workspace: VolumeWorkspace,
        *,
        branch: str,
        leftover: str,
        scratch: Path,
        new_step: bool = False,
        warm: int = 0,
    ) -> None:
        """`warm`: the step's iterations left, if the next ones' containers are to wait,
        started, while one runs (`warm.py`)."""
        self._client = client
        self._settings = settings
        self._docker = (
            WarmDockerSandbox(client, settings, warm) if warm else DockerSandbox(client, settings)
        )
        self.workspace = workspace
        self.branch = branch
        self.leftover = leftover
        self._leftover_kept = True
        """The leftover ref may hold a commit (unknown at first: a resumed step may have one)."""
        self._scratch = scratch
        self._last: Export | None = None
        self._error: str | None = None
        self._new_step = new_step
        """Until an iteration has prepared it: whatever the volume holds is not this step's."""
        self._provided = False

    def _env(self, mode: str) -> dict[str, str]:
        tip, tree = start_of(self.workspace.repo, self.branch)
        env = {
            "FKS_MODE": mode,
            "FKS_BRANCH": self.branch,
            "FKS_START": tip,
            "FKS_START_TREE": tree,
            "FKS_SINCE": tip,
            "TINI_KILL_PROCESS_GROUP": "1",
        }
        if self._new_step:
            env["FKS_NEW_STEP"] = "1"
        if self.workspace.base_index:
            env["FKS_BASE_INDEX"] = self.workspace.base_index
        after = self._last.first("after") if self._last is not None else None
        if after:
            env["FKS_BEFORE"] = after  # the workspace has not changed since
        return env

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[_Exporting]:
        nonce = secrets.token_hex(8)
        env = {**spec.env, **self._env("run"), "FKS_NONCE": nonce}
        if self._new_step or not self._provided:  # later iterations find their branch there
            self.workspace.provide(env["FKS_START"])
            self._provided = True
        logged = self._logged(env, nonce)
        inner = replace(spec, argv=tuple(wrapped(spec.argv)), env=env)
        self._last, self._error = None, None
        with self._runner().start(inner) as execution:
            exporting = _Exporting(
                execution, self, spec.argv[0], PreparedLine(nonce), ReportFilter(nonce), logged
            )
            yield exporting
            placement = self.workspace.placement
            if placement is not None and placement.node is None and exporting.lost is None:
                placement.node = getattr(execution, "node_id", None)

    def _runner(self) -> DockerSandbox | ServiceSandbox:
        """What starts the iteration: a container, or on a swarm a service on the workspace's
        node."""
        if self.workspace.placement is None:
            return self._docker
        from sandbox_runner.backends.docker.runners.service import ServiceSandbox

        return ServiceSandbox(self._client, self._settings, node=self.workspace.placement.node)

    def _logged(self, env: dict[str, str], nonce: str) -> LoggedBundle | None:
        """On a swarm the bundle comes through the log stream (its container is out of reach)."""
        if self.workspace.placement is None:
            return None
        env["FKS_EXPORT_VIA"] = "log"
        return LoggedBundle(nonce, self._scratch / f"bundle-{nonce}", limit=max_bundle_bytes())

    def node_lost(self, why: str) -> None:
        """The iteration's node went down: it is incomplete, and the step goes on elsewhere
        from its branch as the host has it."""
        self._last, self._error = Export(), why
        before = self.workspace.mounts()
        self.workspace.relocate()
        renamed = {a.source: b.source for a, b in zip(before, self.workspace.mounts(), strict=True)}
        mounts = [replace(m, source=renamed.get(m.source, m.source)) for m in self._settings.mounts]
        self._settings = replace(self._settings, mounts=mounts)
        self._new_step, self._provided = True, False

    def prepared(self, line: PreparedLine) -> None:
        """The container's script prepared the workspace (its line came before the agent)."""
        if line.value == "kept":
            return
        self.workspace.base_index = line.base_index
        self._new_step = False

    def close(self) -> None:
        """Remove every container the step's iterations left (warm ones nobody took)."""
        self._docker.close()

    def accept(self, export: Export) -> None:
        self._last, self._error = export, None

    def refuse(self, why: str) -> None:
        self._last, self._error = Export(), why

    def collect(self, container_id: str) -> Export:
        """Read a stopped container's export (before it is removed)."""
        if self.workspace.placement is not None:  # a swarm task: its report was all there is
            self._last, self._error = Export(), "the iteration ended before it reported its work"
            return self._last
        try:
            self._last = read_export(self._client, container_id, self._scratch)
        except ExportError as exc:
            self._last, self._error = Export(), str(exc)
        return self._last

    def export_now(self, env: Mapping[str, str]) -> None:
        """Export the workspace from a container of its own (after a kill, for a salvage)."""
        settings = replace(self._settings, network="none", entry=())
        spec = ExecSpec(
            argv=tuple(wrapped([])),
            cwd=Path(WORKSPACE),
            env={**env, **self._env("export")},
            timeout=120,
        )
        self.workspace.provide(spec.env["FKS_SINCE"])
        if self.workspace.placement is not None:
            self._export_on_swarm(settings, spec)
            return
        with DockerSandbox(self._client, settings).start(spec) as execution:
            for _chunk in execution.chunks():
                pass
            execution.wait()
            self.collect(execution.id)

    def _export_on_swarm(self, settings: ContainerSettings, spec: ExecSpec) -> None:
        """The same as a service pinned to the workspace's node, its report and bundle read
        from its log stream."""
        from sandbox_runner.backends.docker.runners.service import NodeLostError, ServiceSandbox

        assert self.workspace.placement is not None
        nonce = secrets.token_hex(8)
        env = {**spec.env, "FKS_NONCE": nonce}
        logged = self._logged(env, nonce)
        runner = ServiceSandbox(self._client, settings, node=self.workspace.placement.node)
        try:
            with runner.start(replace(spec, env=env)) as execution:
                exporting = _Exporting(
                    execution, self, "export", PreparedLine(nonce), ReportFilter(nonce), logged
                )
                for _chunk in exporting.chunks():
                    pass
                exporting.wait()
        except NodeLostError as exc:
            self.node_lost(str(exc))

    def sync(self, env: Mapping[str, str]) -> Synced:
        """After an iteration: take its commits into the step branch (and leftover ref)."""
        if self._error is None and (self._last is None or not self._last.complete):
            self.export_now(env)
        last = self._last or Export()
        if self._error is not None:
            return Synced(error=self._error)
        if not last.complete:
            return Synced(error="the workspace could not be exported (see the iteration's log)")
        updated: list[str] = []
        if last.bundle is not None:
            try:
                updated = import_bundle(
                    self.workspace.repo, last.bundle, self.branch, self.leftover
                )
            except GitError as exc:
                return Synced(
                    error=f"the agent's commits were refused: {exc}", warnings=last.warnings
                )
            finally:
                last.bundle.unlink(missing_ok=True)
        self._track_leftover(self.leftover in updated)
        return Synced(changed=last.changed, warnings=last.warnings)

    def _track_leftover(self, exported: bool) -> None:
        """An iteration that left nothing uncommitted makes an earlier one's leftover commit
        stale: it must not land (files the agent deleted since would come back)."""
        if not exported and self._leftover_kept:
            git(self.workspace.repo.top, "update-ref", "-d", self.leftover, check=False)
        self._leftover_kept = exported


class _Exporting:
    """A running iteration; reading its exit status also reads what it exported."""

    def __init__(
        self,
        execution: Execution,
        owner: WorkspaceSandbox,
        agent: str,
        prepared: PreparedLine,
        report: ReportFilter,
        logged: LoggedBundle | None = None,
    ) -> None:
        """`logged`: the bundle comes through the log stream (a swarm task)."""
        self._execution = execution
        self._owner = owner
        self._agent = agent
        self._prepared = prepared
        self._report = report
        self._logged = logged
        self.lost: str | None = None
        """Why the iteration's node is gone (a swarm task), if it is."""

    @property
    def id(self) -> str:
        return self._execution.id

    @property
    def container_id(self) -> str | None:
        return self._execution.container_id

    def kill(self) -> None:
        self._execution.kill()

    def chunks(self) -> Iterator[tuple[Stream, bytes]]:
        from sandbox_runner.backends.docker.runners.service import NodeLostError

        try:
            for stream, data in self._execution.chunks():
                if stream == "stderr":
                    data = self._stderr(data)
                if data:
                    yield stream, data
        except NodeLostError as exc:
            self.lost = str(exc)
        rest = self._prepared.finish()
        if self._logged is not None:
            rest = self._logged.feed(rest) + self._logged.finish()
        rest = self._report.feed(rest) + self._report.finish()
        if rest:
            yield "stderr", rest

    def _stderr(self, data: bytes) -> bytes:
        """The agent's output without fks's lines: prepared, bundle (swarm) and report."""
        seen = self._prepared.value is not None
        data = self._prepared.feed(data)
        if not seen and self._prepared.value is not None:
            self._owner.prepared(self._prepared)
        if self._logged is not None:
            data = self._logged.feed(data)
        return self._report.feed(data)

    def wait(self) -> ExecResult:
        from sandbox_runner.backends.docker.runners.service import NodeLostError

        try:
            result = self._succeeded() or (self._execution.wait() if self.lost is None else None)
        except NodeLostError as exc:
            self.lost, result = str(exc), None
        if result is None or self.lost is not None:
            self._owner.node_lost(self.lost or "the iteration's swarm node went down")
            return ExecResult(exit_code=255, container_id=self.container_id)
        export = self._exported()
        if export.agent_missing and result.exit_code == 127:
            raise AgentNotFoundError(
                f"Agent '{self._agent}' not found in the image (not on its PATH, or "
                "not in the workspace); install it in the image or give a path in the repository"
            )
        return result

    def _succeeded(self) -> ExecResult | None:
        """The script's report, once its output has ended, when it says the agent exited 0
        and fks did not kill it: the container is ending, and Docker need not be waited for
        (its stop takes tens of ms more). Anything else - no report, a failure (which may be
        the memory limit's doing), a timeout, a swarm task - is asked of Docker. A report the
        agent forged can claim only the exit it could have chosen itself."""
        reported = self._report.reported()
        if (
            reported is None
            or reported.first("code") != "0"
            or not isinstance(self._execution, DockerExecution)
            or self._execution.timed_out
        ):
            return None
        return ExecResult(exit_code=0, container_id=self.container_id)

    def _exported(self) -> Export:
        """What the iteration exported: its report, and the bundle if it made one (from the
        log stream on a swarm, else fetched from the stopped container)."""
        if self._logged is None:
            export = self._report.export()
            if export is None:
                return self._owner.collect(self._execution.id)
            self._owner.accept(export)  # nothing to fetch: the report is all there is
            return export
        reported = self._report.reported()
        if reported is None:
            return self._owner.collect(self._execution.id)
        try:
            bundle = self._logged.result() if "bundle" in reported.values else None
        except ExportError as exc:
            self._owner.refuse(str(exc))
            return Export()
        export = Export(values=reported.values, bundle=bundle)
        self._owner.accept(export)
        return export
