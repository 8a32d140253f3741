"""A workspace kept per repository between runs (`sandbox.keepWorkspace`, the local engine): a
volume `fks-ws-kept-…` that the next run's first step brings to its base by a checkout of what
differs, as a run's later steps recycle its volume (`iteration.sh`), instead of every file
written into a new volume and deleted again with it.

The host trusts nothing in the volume. What it keeps between runs, on its side, is the volume's
name (random, made at the repository's first run: another repository at the same path, a CI
job in another container sharing the engine, never finds it) and what the last checkout there
reported of the base index it wrote before any agent ran (`inode:ctime:size`), in
`.git/fks/kept-workspace.json`, where no agent reaches; the next checkout trusts that index
only if it finds it so, else it removes everything in the volume and checks out in full. One
run at a time holds the volume (an flock on `.git/fks/kept-workspace.lock`); a run that
finds it held works in a volume of its own, as without the setting. A run that stops with a
step unfinished in it (interrupted, or killed) leaves it marked as that run's, for `--resume`
and `fks clean`, and other runs leave it alone until then. `fks clean` removes kept
workspaces nobody holds.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from sandbox_runner.git.repo import Repo
from sandbox_runner.labels import LABEL_IMAGE, LABEL_REPO, LABEL_ROLE, LABEL_RUN
from sandbox_runner.paths import write_atomic

if TYPE_CHECKING:
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace

KEPT_ROLE = "kept-workspace"
_NAME = re.compile(r"fks-ws-kept-[0-9a-f]{20}")


def _new_name() -> str:
    return f"fks-ws-kept-{secrets.token_hex(10)}"


def kept_volume_name(repo_top: Path) -> str | None:
    """The kept workspace volume of the repository whose work tree is `repo_top`, as its state
    names it (None before its first run)."""
    from sandbox_runner.git.repo import open_repo

    state = read_state(open_repo(repo_top, what="the kept workspace"))
    return state.volume if state is not None else None


class KeptState(BaseModel):
    """`.git/fks/<volume>.json`: what the host knows of the repository's kept workspace."""

    model_config = ConfigDict(extra="forbid")

    volume: str
    """The volume's name."""
    base_index: str | None = None
    """The base index's identity at the last checkout in it, as its container reported it
    before its agent started (None: not known, so the next checkout is a full one)."""
    run: str | None = None
    """The run that holds it: while it runs, and after it stopped with a step unfinished
    there (that step's work may still be in it)."""
    image: str | None = None
    """The image that run's steps ran in (for `fks clean`'s export of that work)."""


@dataclass
class KeptWorkspace:
    """The kept workspace of one repository, held by one run."""

    repo: Repo
    name: str
    """The volume's name (see KeptState.volume)."""
    base_index: str | None
    """What a checkout may trust in it (see KeptState.base_index)."""

    def labels(self, image: str) -> dict[str, str]:
        return {LABEL_ROLE: KEPT_ROLE, LABEL_REPO: str(self.repo.top), LABEL_IMAGE: image}

    def release(
        self, workspace: VolumeWorkspace, run_id: str, image: str, unfinished: bool
    ) -> None:
        """The run is over: the volume is trusted as far as its last checkout said, or, with a
        step `unfinished` in it, left as that run's."""
        if unfinished:
            state = KeptState(volume=self.name, run=run_id, image=image)
        else:
            state = KeptState(volume=self.name, base_index=workspace.base_index)
        _write(self.repo, state)


def _path(repo: Repo, suffix: str) -> Path:
    return repo.common_dir / "fks" / f"kept-workspace{suffix}"


def read_state(repo: Repo) -> KeptState | None:
    """The repository's kept-workspace state, or None (none, or one fks did not write)."""
    try:
        state = KeptState.model_validate_json(_path(repo, ".json").read_bytes())
    except (OSError, ValidationError):
        return None
    return state if _NAME.fullmatch(state.volume) else None


def _write(repo: Repo, state: KeptState) -> None:
    write_atomic(_path(repo, ".json"), state.model_dump_json())


def forget(repo: Repo) -> None:
    """The kept workspace is gone."""
    _path(repo, ".json").unlink(missing_ok=True)


@contextmanager
def held(repo: Repo) -> Iterator[bool]:
    """The repository's kept-workspace lock, if no other process holds it (True: held)."""
    path = _path(repo, ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def kept_for_run(
    stack: ExitStack, repo: Repo, run_id: str, image: str, *, resumed: bool
) -> KeptWorkspace | None:
    """The repository's kept workspace, held as long as `stack` lives, or None: another run
    holds it, or it holds an unfinished step of another run, or (`resumed`) the run did not
    leave one there (its work is in a volume of its own)."""
    lock = ExitStack()
    kept = _take(repo, run_id, image, resumed=resumed) if lock.enter_context(held(repo)) else None
    if kept is None:
        lock.close()
    else:
        stack.push(lock)
    return kept


def _take(repo: Repo, run_id: str, image: str, *, resumed: bool) -> KeptWorkspace | None:
    state = read_state(repo)
    if state is not None and state.run is not None and state.run != run_id:
        return None
    if resumed and (state is None or state.run != run_id):
        return None
    name = state.volume if state is not None else _new_name()
    trusted = state.base_index if state is not None and state.run is None else None
    # Until the run says otherwise, the volume is its own: a killed run leaves it so.
    _write(repo, KeptState(volume=name, run=run_id, image=image))
    return KeptWorkspace(repo, name, trusted)


def dead_holder_labels(repo: Repo) -> dict[str, str] | None:
    """The labels of a run's workspace for the run the kept workspace holds work of (for `fks
    clean` to export it onto that step's branch), or None."""
    state = read_state(repo)
    if state is None or state.run is None:
        return None
    labels = {LABEL_RUN: state.run, LABEL_REPO: str(repo.top)}
    if state.image:
        labels[LABEL_IMAGE] = state.image
    return labels
