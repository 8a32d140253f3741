"""The `Sandbox` that runs a step's iterations on its workspace (`volume.py`) and brings
their commits home as data: after each iteration (`exporting.py`) the host reads its export
(see `export.py`) and takes its bundle, every object fsck'ed, into the step branch and nothing
else. Where the iteration runs, and how its export reaches the host, the workspace says.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecSpec, Notices, Phase, PhaseName
from sandbox_runner.backends.docker.runners.container import ContainerSettings, DockerSandbox
from sandbox_runner.backends.docker.runners.warm import WarmDockerSandbox
from sandbox_runner.backends.docker.workspace.export import (
    WORKSPACE,
    Export,
    ExportError,
    PreparedLine,
    files_env,
    wrapped,
)
from sandbox_runner.backends.docker.workspace.exporting import Exporting
from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace
from sandbox_runner.git.bundles import import_bundle
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import GitError, git

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.egress.proxy import EgressProxy


def _spent(meter: EgressProxy, number: int) -> float | None:
    return meter.metered(number).spent


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
        notices: Notices | None = None,
        meter: EgressProxy | None = None,
    ) -> None:
        """`warm`: the step's iterations left, if the next ones' containers are to wait,
        started, while one runs (`runners/warm.py`). `notices`: told each phase of an
        iteration as it ends (container, checkout, export, import). `meter`: the step's egress
        proxy (it may get ready beside the first container; when it meters the model APIs'
        calls, it holds each iteration's budget)."""
        self._proxy = meter
        self._meter = meter if meter is not None and meter.metering else None
        self._notices = notices
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
        self.scratch = scratch
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

    def timed(self, name: PhaseName, since: float, detail: str = "") -> None:
        """Phase `name`, begun at `since` (time.monotonic()), has ended."""
        if self._notices is not None:
            self._notices.phase(Phase(name, time.monotonic() - since, detail))

    @contextmanager
    def start(self, spec: ExecSpec) -> Iterator[Exporting]:
        began = time.monotonic()
        nonce = secrets.token_hex(8)
        env = {**spec.env, **files_env(spec.files), **self._env("run"), "FKS_NONCE": nonce}
        if self._new_step or not self._provided:  # later iterations find their branch there
            self.workspace.provide(env["FKS_START"])
            self._provided = True
        channel = self.workspace.export_channel(env, nonce, self.scratch)
        inner = replace(spec, argv=tuple(wrapped(spec.argv)), env=env, files={})
        self._last, self._error = None, None
        meter = self._meter
        number = meter.open_iteration(spec.max_cost) if meter is not None else 0
        with self.workspace.runner(self._docker, self._settings).start(inner) as execution:
            self.timed("container", began)
            if self._proxy is not None:
                self._proxy.ready()  # it started beside this container, whose agent waits for it
            metered = None
            if meter is not None:
                meter.spends.watch(number, execution.kill)  # a refused request ends it
                metered = functools.partial(_spent, meter, number)
            exporting = Exporting(execution, self, spec.argv[0], nonce, channel, metered)
            yield exporting
            if exporting.lost is None:
                self.workspace.placed(execution)

    def place_lost(self, why: str) -> None:
        """The place the iteration ran on went away: it is incomplete, and the step goes on
        elsewhere (the workspace moves) from its branch as the host has it."""
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
        """Remove every container the step's iterations left (warm ones nobody took), and
        what the workspace kept for them."""
        try:
            self._docker.close()
        finally:
            self.workspace.idle()

    def accept(self, export: Export) -> None:
        self._last, self._error = export, None

    def refuse(self, why: str) -> None:
        self._last, self._error = Export(), why

    def collect(self, container_id: str) -> Export:
        """Read a stopped container's export (before it is removed)."""
        try:
            self._last = self.workspace.read_export(container_id, self.scratch)
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
        self.workspace.export(self, settings, spec)

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
            began = time.monotonic()
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
            self.timed("import", began, _moved(updated, self.leftover))
        self._track_leftover(self.leftover in updated)
        return Synced(changed=last.changed, warnings=last.warnings)

    def _track_leftover(self, exported: bool) -> None:
        """An iteration that left nothing uncommitted makes an earlier one's leftover commit
        stale: it must not land (files the agent deleted since would come back)."""
        if not exported and self._leftover_kept:
            git(self.workspace.repo.top, "update-ref", "-d", self.leftover, check=False)
        self._leftover_kept = exported


def _moved(updated: list[str], leftover: str) -> str:
    """What an import moved, for -v."""
    parts = ["the step branch"] if any(ref != leftover for ref in updated) else []
    if leftover in updated:
        parts.append("what was left uncommitted")
    return " and ".join(parts)
