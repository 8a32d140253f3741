"""The base of a workspace on an engine that cannot see this machine's disk, sent as data.

Locally the user's object store is bind-mounted read-only at /fks/objects. A remote engine
gets a Docker volume there instead: an object store that holds what fks sent it, as packs.
Before a step starts on a commit the volume lacks, the host packs what is new since what it
sent before (`git pack-objects --revs --thin`, from the user's repository: the host's own
data) and a loader container on that engine takes it in through the Docker API
(`put_archive`) and indexes it into the volume (`git index-pack --strict --fix-thin`). Agent
containers mount the volume read-only; only the loader, which runs no agent code, writes it.
Nothing comes back this way: commits come out as bundles, as on the local engine.
"""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.client import (
    ensure_volume,
    one_line,
    remove_volume,
    with_retries,
)
from sandbox_runner.backends.docker.container import Mount, create_container
from sandbox_runner.backends.docker.export import OBJECTS
from sandbox_runner.errors import SandboxError
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import run_git

if TYPE_CHECKING:
    import docker

LABEL_ROLE = "fks.role"
OBJECTS_ROLE = "objects"
_PACK = "fks-in.pack"
# The loader: an empty repository whose object directory is the volume, and the pack indexed
# into it with every object checked and thin deltas completed from what the volume holds.
_INDEX = (
    f"git init -q --bare /tmp/r; mkdir -p {OBJECTS}/pack {OBJECTS}/info; "
    f"GIT_DIR=/tmp/r GIT_OBJECT_DIRECTORY={OBJECTS} git index-pack --stdin --strict "
    "--fix-thin <{pack} >/dev/null"
)
_LOADER = "set -e; " + _INDEX.format(pack=f"/{_PACK}")
LOADER_TIMEOUT_S = 1800


@dataclass
class Placement:
    """The swarm node a workspace's volumes are on (None until its first service ran)."""

    node: str | None = None


def objects_volume_name(workspace_volume: str) -> str:
    """The object store volume beside workspace volume `fks-ws-…`: `fks-obj-…`."""
    return "fks-obj-" + workspace_volume.removeprefix("fks-ws-")


class ShippedObjects:
    """A remote workspace's object store: a volume on the engine, and what fks sent into it."""

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
                "--thin",
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
        """Run the loader on the engine with the pack put into it before it starts."""
        from docker.types import Mount as DockerMount

        archive = pack.with_suffix(".tar")
        with tarfile.open(archive, "w") as tar:
            info = tar.gettarinfo(str(pack), arcname=_PACK)
            info.uid = info.gid = 0
            info.mode = 0o444
            with pack.open("rb") as data:
                tar.addfile(info, data)

        kwargs = {
            "image": self._image,
            "command": ["sh", "-c", _LOADER],
            "user": "0:0",
            "labels": self._labels,
            "mounts": [DockerMount(target=OBJECTS, source=self.name, type="volume")],
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": "1g",
            "detach": True,
        }
        container = create_container(self._client, kwargs, what="the workspace loader")
        try:
            with archive.open("rb") as data:
                with_retries("put_archive", lambda: container.put_archive("/", data))
            with_retries("start", container.start)
            status = container.wait(timeout=LOADER_TIMEOUT_S)
            if int(status.get("StatusCode", -1)) != 0:
                tail = container.logs(stdout=True, stderr=True, tail=5).decode(errors="replace")
                raise SandboxError(
                    f"could not load the workspace's base into volume {self.name}: "
                    f"{one_line(tail) or 'exit ' + str(status.get('StatusCode'))}"
                )
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def ensure(self) -> None:
        ensure_volume(self._client, self.name, self._labels)

    def remove(self) -> None:
        remove_volume(self._client, self.name)
