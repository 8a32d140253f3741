"""A step's workspace: a Docker volume holding a git repository, mounted at /workspace.

Its repository borrows the user's objects (mounted read-only at /fks/objects) as an alternate,
so preparing it costs only the files a step checks out, and a run's later steps recycle it (a
checkout rewrites only the files that differ). The user's `.git` itself is never mounted. On
an engine that cannot see this machine's disk the objects are a volume fks sends them to
(`shipping.py`). The workspace also says how an iteration on it runs and how its work comes
back: here a container on the same engine, its bundle carried in its output when it is small, else
read from the stopped container through the API (`export.py`, `logged_bundle.py`); a workspace of another kind of target answers differently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.backends.docker.engine.client import ensure_volume, remove_volume, volume_exists
from sandbox_runner.backends.docker.runners.container import (
    ContainerSettings,
    DockerSandbox,
    Mount,
)
from sandbox_runner.backends.docker.workspace.export import (
    OBJECTS,
    WORKSPACE,
    Export,
    ExportChannel,
    max_bundle_bytes,
    read_export,
)
from sandbox_runner.backends.docker.workspace.logged_bundle import LOG_BUNDLE_BYTES, SmallInOutput
from sandbox_runner.git.repo import Repo

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.api import ExecSpec, Execution
    from sandbox_runner.backends.docker.runners.iteration import IterationRunner
    from sandbox_runner.backends.docker.workspace.exporting import ExportOwner


def volume_name(run_id: str, repo_top: Path) -> str:
    digest = hashlib.sha256(str(repo_top).encode()).hexdigest()[:10]
    return f"fks-ws-{run_id}-{digest}"


class ObjectStore(Protocol):
    """What a workspace's repository borrows its objects from, at /fks/objects."""

    def mount(self) -> Mount: ...

    def provide(self, commit: str) -> None: ...

    def ensure(self) -> None: ...

    def remove(self) -> None: ...


class UserObjects:
    """The user's own object store, bind-mounted read-only (the local engine sees it)."""

    def __init__(self, repo: Repo) -> None:
        self._repo = repo

    def mount(self) -> Mount:
        return Mount(source=str(self._repo.objects), target=OBJECTS, read_only=True)

    def provide(self, commit: str) -> None:
        """Every commit of the user's is there already."""

    def ensure(self) -> None:
        """Nothing to make."""

    def remove(self) -> None:
        """Never removed: it is the user's."""


class VolumeWorkspace:
    """The Docker volume a run's steps in one repository work in."""

    def __init__(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        labels: Mapping[str, str],
        *,
        shipped: ObjectStore | None = None,
    ) -> None:
        """`shipped`: on an engine that cannot see this machine's disk, the volume that holds
        the objects fks sent it, in place of the user's (see `shipping.py`)."""
        self._client = client
        self.repo = repo
        self.name = name
        self._labels = dict(labels)
        self.objects: ObjectStore = shipped if shipped is not None else UserObjects(repo)
        self.base_index: str | None = None
        """What the last checkout in the volume reported of its base index (`<inode>:<ctime>:<size>`,
        see `iteration.sh`), taken from a container before its agent started; None: unknown
        (a new volume, or one this process did not check out), so a new step checks out in full."""
        self.lasting = False
        """Kept after the run (`kept.py`): not removed with it."""

    def exists(self) -> bool:
        return volume_exists(self._client, self.name)

    def ensure(self) -> None:
        ensure_volume(self._client, self.name, self._labels)
        self.objects.ensure()

    def provide(self, commit: str) -> None:
        """Make `commit` readable at /fks/objects."""
        self.objects.provide(commit)

    def mounts(self) -> list[Mount]:
        return [Mount(source=self.name, target=WORKSPACE, volume=True), self.objects.mount()]

    def remove(self) -> None:
        remove_volume(self._client, self.name)
        self.objects.remove()

    def idle(self) -> None:
        """The step that used it is over: nothing is held for it here."""

    def relocate(self) -> None:
        """The place it is on went away: only a workspace on one node of several moves."""
        raise NotImplementedError

    # --- how an iteration on it runs, and how its work comes back ------------------------------

    def runner(self, containers: DockerSandbox, settings: ContainerSettings) -> IterationRunner:
        """What starts an iteration: the step's containers, on the workspace's engine."""
        return containers

    def placed(self, execution: Execution) -> None:
        """An iteration ran on the workspace: nothing to note where its engine is one."""

    def export_channel(self, env: dict[str, str], nonce: str, scratch: Path) -> ExportChannel:
        """How an iteration's bundle reaches the host (`env`: the iteration's, to tell its
        script): in its output when it is small, else read from the stopped container."""
        limit = min(LOG_BUNDLE_BYTES, max_bundle_bytes())
        return SmallInOutput(env, nonce, scratch / f"bundle-{nonce}", limit)

    def read_export(self, container_id: str, scratch: Path) -> Export:
        """A stopped container's export, through the API (ExportError if it cannot be had)."""
        return read_export(self._client, container_id, scratch)

    def export(self, owner: ExportOwner, settings: ContainerSettings, spec: ExecSpec) -> None:
        """Run `spec` (the script alone, exporting) in a container of its own, then collect."""
        with DockerSandbox(self._client, settings).start(spec) as execution:
            for _chunk in execution.chunks():
                pass
            execution.wait()
            owner.collect(execution.id)
