"""Parsed run records kept between requests: a `run.json` is parsed again only when its size,
modification time or inode changed (fks rewrites it by replacing the file), so listing
thousands of runs costs a `stat` each. Every page reads records (and logs) through here: no
link is followed, nothing but a regular file is opened (a FIFO would block), nothing larger
than `RECORD_LIMIT` is read."""

from __future__ import annotations

import gc
import os
import stat
import threading
from pathlib import PurePosixPath
from typing import BinaryIO, NamedTuple

from pydantic import ValidationError

from sandbox_runner.nofollow import open_dir
from sandbox_runner.records.record import RunRecord
from sandbox_runner.records.store import RunStore

RECORD_LIMIT = 64 << 20
"""Bytes of one run.json read at most (a step of 1,000 iterations takes about 1 MiB)."""

_Key = tuple[int, int, int]


_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def record_key(path: str, dir_fd: int | None = None) -> _Key | None:
    """What identifies one version of the file at `path` (in the folder `dir_fd` if given;
    None: no such regular file)."""
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)  # a link is no record
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_record(
    path: str, limit: int = RECORD_LIMIT, dir_fd: int | None = None
) -> RunRecord | None:
    """The run record at `path` (in the folder `dir_fd` if given); None when it is missing, a
    link, not a regular file, too large or not a run record."""
    try:
        fd = os.open(path, _OPEN, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        return RunRecord.model_validate_json(data)
    except ValidationError:
        return None


class RunFacts(NamedTuple):
    """Sums over a run's steps and iterations."""

    cost: float


class RecordCache:
    """The readable run records of each store, parsed once per version of their file."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[_Key, RunRecord | None]] = {}
        self._facts: dict[int, tuple[RunRecord, RunFacts]] = {}
        self._lock = threading.Lock()
        # One reader at a time: a page asked for while the records are parsed (as `fks ui`
        # starts) waits for them instead of parsing them a second time.
        self._reading = threading.Lock()

    def facts(self, record: RunRecord) -> RunFacts:
        """What the runs page sums of `record`, worked out once per record this cache gave."""
        found = self._facts.get(id(record))
        if found is not None and found[0] is record:
            return found[1]
        facts = RunFacts(cost=record.cost_usd)
        self._facts[id(record)] = (record, facts)
        return facts

    def records(self, store: RunStore) -> list[RunRecord]:
        """Every readable record of `store` (in no particular order)."""
        with self._reading:
            return self._read(store)

    def _read(self, store: RunStore) -> list[RunRecord]:
        try:
            entries = [e.name for e in os.scandir(store.root) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        root = str(store.root)
        found: list[RunRecord] = []
        seen: set[str] = set()
        parsed = len(self._parsed)
        for name in entries:
            path = f"{root}{os.sep}{name}{os.sep}run.json"
            seen.add(path)
            record = self._record(path)
            if record is not None:
                found.append(record)
        self._forget(root, seen)
        if len(self._parsed) > parsed:
            # Records stay for long: keep them out of the cycle collector, whose full passes
            # over thousands of them would add some 200 ms to a page now and then.
            gc.freeze()
        return found

    def run(self, store: RunStore, run_id: str) -> RunRecord | None:
        """The record of run `run_id` (a run id, no path) of `store`, read as the runs list
        reads it: None when it is unreadable or the run's folder, or one above it in the
        project, is a link."""
        folder = run_folder(store, run_id)
        if folder is None:
            return None
        try:
            path = f"{store.root}{os.sep}{run_id}{os.sep}run.json"
            return self._record(path, (folder, "run.json"))
        finally:
            os.close(folder)

    def _record(self, path: str, inside: tuple[int, str] | None = None) -> RunRecord | None:
        """The record at `path`, or at `inside` (a folder's descriptor and a name) if given."""
        at, dir_fd = (path, None) if inside is None else (inside[1], inside[0])
        key = record_key(at, dir_fd)
        if key is None:
            return None
        with self._lock:
            cached = self._parsed.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        record = read_record(at, dir_fd=dir_fd)
        with self._lock:
            self._parsed[path] = (key, record)
            if cached is not None and cached[1] is not None:
                self._facts.pop(id(cached[1]), None)
        return record

    def _forget(self, root: str, seen: set[str]) -> None:
        """Drop the records of runs that are gone from `root`."""
        prefix = root + os.sep
        with self._lock:
            for path in [p for p in self._parsed if p.startswith(prefix) and p not in seen]:
                _, record = self._parsed.pop(path)
                self._facts.pop(id(record), None)


def run_folder(store: RunStore, run_id: str, *inner: str) -> int | None:
    """A descriptor of run `run_id`'s folder (or of the folder `inner` in it; the caller
    closes it), no link followed from the project down; None when it is not there."""
    try:
        relative = store.run_dir(run_id).relative_to(store.project).joinpath(*inner)
        return open_dir(store.project, relative, create=False)
    except (OSError, ValueError):  # LinkRefused is an OSError
        return None


def open_log(store: RunStore, run_id: str, log: str) -> BinaryIO | None:
    """The log `log` (a path relative to the run's folder, as its record names it) of run
    `run_id`, open for reading; None unless it is a regular file inside the run's folder,
    reached without a link."""
    path = PurePosixPath(log)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        return None
    folder = run_folder(store, run_id, *path.parts[:-1])
    if folder is None:
        return None
    try:
        fd = os.open(path.parts[-1], _OPEN, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")
