"""The base of a workspace on an engine that cannot see this machine's disk, sent as data.

Locally the user's object store is bind-mounted read-only at /fks/objects. A remote engine
gets a Docker volume there instead: an object store that holds what fks sent it, as packs.
Before a step starts on a commit the volume lacks, the host packs what is new since what it
sent before (`git pack-objects --revs`, from the user's repository: the host's own data),
indexes that pack itself (`git index-pack`, outside any repository) and puts both files into
the volume through the Docker API (`put_archive` into a container that mounts it and is never
started: nothing runs on the engine for it). Agent containers mount the volume read-only;
only fks writes it. Nothing comes back this way: commits come out as bundles, as on the
local engine.
"""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.docker.engine.client import (
    create_container,
    ensure_volume,
    remove_volume,
    with_retries,
)
from sandbox_runner.backends.docker.runners.container import Mount
from sandbox_runner.backends.docker.workspace.export import OBJECTS
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import run_git
from sandbox_runner.labels import LABEL_ROLE

if TYPE_CHECKING:
    import docker

OBJECTS_ROLE = "objects"
_PACK = "fks-in.pack"


def objects_volume_name(workspace_volume: str) -> str:
    """The object store volume beside workspace volume `fks-ws-…`: `fks-obj-…`."""
    return "fks-obj-" + workspace_volume.removeprefix("fks-ws-")


class ShippedObjects:
    """A remote workspace's object store: a volume on the engine, and what fks sent into it."""

    thin = False
    """Send thin packs (deltas against what the volume holds): only for a loader on the engine
    that can complete them there; fks indexes its own packs, which must stand alone."""

    def __init__(
        self,
        client: docker.DockerClient,
        repo: Repo,
        name: str,
        *,
        image: str,
        labels: Mapping[str, str],
    ) -> None:
        self._client = client
        self._repo = repo
        self.name = name
        self._image = image
        self._labels = {**labels, LABEL_ROLE: OBJECTS_ROLE}
        self._sent: list[str] = []
        """Commits whose history the volume holds (sent by this process)."""

    def mount(self) -> Mount:
        return Mount(source=self.name, target=OBJECTS, read_only=True, volume=True)

    def forget(self) -> None:
        """The volume is another (a new one): nothing was sent to it yet."""
        self._sent.clear()

    def provide(self, commit: str) -> None:
        """Make the volume hold `commit` and its history (nothing to do if it does already)."""
        if commit in self._sent:
            return
        with tempfile.TemporaryDirectory(prefix="fks-ship-") as scratch:
            pack = Path(scratch) / _PACK
            if self._pack(commit, pack):
                self._load(pack)
        self._sent.append(commit)

    def _pack(self, commit: str, pack: Path) -> bool:
        """The pack of what `commit` has beyond what was sent; False: nothing to send."""
        wanted = "".join([f"{commit}\n", *(f"^{sent}\n" for sent in self._sent)])
        revs = pack.with_suffix(".revs")
        revs.write_text(wanted, encoding="ascii")
        with pack.open("wb") as out, revs.open("rb") as revs_in:
            done = run_git(
                self._repo.top,
                "pack-objects",
                "--revs",
                *(["--thin"] if self.thin else []),
                "--stdout",
                "--delta-base-offset",
                "-q",
                stdin=revs_in,
                stdout=out,
            )
        if done.returncode != 0:
            detail = one_line(done.stderr.decode(errors="replace")) or "no output"
            raise SandboxError(f"could not pack commit {commit[:12]} for the engine: {detail}")
        return pack.stat().st_size > 32  # more than a header and a trailer: objects

    def _load(self, pack: Path) -> None:
        """Index the pack here and put it, with its index, into the volume: through a container
        that mounts the volume and is only created, never started."""
        archive = _indexed_archive(pack)
        kwargs = {
            "image": self._image,
            "command": ["true"],
            "user": "0:0",
            "labels": self._labels,
            "mounts": [_volume_mount(self.name)],
            "network_mode": "none",
            "detach": True,
        }
        container = create_container(self._client, kwargs, what="the workspace loader")
        try:
            with archive.open("rb") as data:
                with_retries("put_archive", lambda: container.put_archive(OBJECTS, data))
        except Exception as exc:
            raise SandboxError(
                f"could not load the workspace's base into volume {self.name}: {one_line(str(exc))}"
            ) from None
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def ensure(self) -> None:
        ensure_volume(self._client, self.name, self._labels)

    def remove(self) -> None:
        remove_volume(self._client, self.name)


def _volume_mount(name: str) -> Any:
    from docker.types import Mount as DockerMount

    return DockerMount(target=OBJECTS, source=name, type="volume")


def _indexed_archive(pack: Path) -> Path:
    """A tar of `pack/pack-<hash>.{pack,idx}`: the pack and the index this machine's git made of
    it (in a repository of its own beside the pack: the user's is never touched)."""
    scratch = pack.parent
    bare = scratch / "index-repo"
    env = {
        "GIT_DIR": str(bare),
        "GIT_OBJECT_DIRECTORY": str(bare / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
    }
    idx = pack.with_suffix(".idx")
    done = run_git(scratch, "init", "-q", "--bare", str(bare))
    if done.returncode == 0:
        done = run_git(scratch, "index-pack", "-o", str(idx), str(pack), env=env)
    if done.returncode != 0:
        detail = one_line(done.stderr.decode(errors="replace")) or "no output"
        raise SandboxError(f"could not index the workspace's base: {detail}")
    name = "pack-" + done.stdout.decode().split()[-1]
    archive = pack.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        folder = tarfile.TarInfo("pack")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for source, suffix in ((pack, ".pack"), (idx, ".idx")):  # the index last: git's key
            info = tar.gettarinfo(str(source), arcname=f"pack/{name}{suffix}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o444
            with source.open("rb") as data:
                tar.addfile(info, data)
    return archive
