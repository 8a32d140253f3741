"""One run at a time per repository and base branch.

An advisory `flock` on `.forge/locks/branches/<base>-<hash>.lock` (and `.forge/locks/in-place.lock`
for a run in place, which holds its checked-out branch's too): the kernel drops it when its
process dies
(even by `kill -9`), so a stale lock is reclaimed by simply taking it. The file's content
names the holder for the error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.bounded import load_json
from sandbox_runner.errors import LockedError
from sandbox_runner.records.layout import ForgeLayout


@dataclass
class RunLock:
    """A held lock; `set_run` records the run id for whoever is refused next."""

    fd: int
    path: Path
    label: str
    reclaimed_from: str | None = None

    def set_run(self, run_id: str) -> None:
        self._write({"run": run_id, "pid": os.getpid(), "label": self.label})

    def _write(self, holder: dict[str, object]) -> None:
        data = json.dumps(holder).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)


def lock_path(project: Path, base_branch: str | None) -> Path:
    layout = ForgeLayout(project)
    return layout.branch_lock(base_branch) if base_branch else layout.lock("in-place")


def _holder(fd: int) -> dict[str, object]:
    try:
        raw = os.pread(fd, 4096, 0)
        holder = load_json(raw or b"{}", max_bytes=4096)
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


@contextmanager
def run_lock(
    project: Path, base_branch: str | None, *, run_label: str, shared: bool = False
) -> Iterator[RunLock]:
    """Hold the lock for `base_branch` (None: the in-place lock of the project) or fail fast.

    `shared`: with other shared holders (`fks forge` runs, which claim tasks one by one) but
    never with an exclusive one (a chain)."""
    path = lock_path(project, base_branch)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            what = f"base branch '{base_branch}'" if base_branch else f"{project}"
            run = holder.get("run") or "a starting run"
            pid = holder.get("pid", "?")
            raise LockedError(
                f"run {run} (pid {pid}) is already running on {what}; wait for it to finish, "
                f"or stop it (kill {pid}) - a dead run's lock is reclaimed automatically"
            ) from None
        previous = _holder(fd)
        lock = RunLock(fd=fd, path=path, label=run_label)
        if previous.get("run") and not shared:
            lock.reclaimed_from = str(previous["run"])
        lock._write({"run": None, "pid": os.getpid(), "label": run_label})
        try:
            yield lock
        finally:
            with contextlib.suppress(OSError):
                if shared:  # the last shared holder clears the name
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)


@dataclass
class RunLocks:
    """The locks one run holds (a run in place: its checked-out branch's and the checkout's)."""

    locks: list[RunLock]

    @property
    def reclaimed_from(self) -> str | None:
        return next((lock.reclaimed_from for lock in self.locks if lock.reclaimed_from), None)

    def set_run(self, run_id: str) -> None:
        for lock in self.locks:
            lock.set_run(run_id)


@contextmanager
def run_locks(project: Path, bases: Sequence[str | None], *, run_label: str) -> Iterator[RunLocks]:
    """Hold the exclusive lock of each of `bases` (see `run_lock`), in order, or fail fast."""
    with ExitStack() as stack:
        yield RunLocks(
            [stack.enter_context(run_lock(project, b, run_label=run_label)) for b in bases]
        )


@contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Hold an flock on `path`, waiting for it (fks forge: its work items and its merge queue)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
