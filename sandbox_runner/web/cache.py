"""Parsed run records kept between requests: a `run.json` is parsed again only when its size,
modification time or inode changed (fks rewrites it by replacing the file), so listing
thousands of runs costs a `stat` each."""

from __future__ import annotations

import gc
import os
import stat
import threading
from typing import NamedTuple

from pydantic import ValidationError

from sandbox_runner.records.store import RunRecord, RunStore

RECORD_LIMIT = 64 << 20
"""Bytes of one run.json read at most (a step of 1,000 iterations takes about 1 MiB)."""

_Key = tuple[int, int, int]


def record_key(path: str) -> _Key | None:
    """What identifies one version of the file at `path` (None: no such regular file)."""
    try:
        st = os.lstat(path)  # a link is not followed: it is no record
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_record(path: str, limit: int = RECORD_LIMIT) -> RunRecord | None:
    """The run record at `path`; None when it is missing, too large or not a run record."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
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

    def _record(self, path: str) -> RunRecord | None:
        key = record_key(path)
        if key is None:
            return None
        with self._lock:
            cached = self._parsed.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        record = read_record(path)
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
