"""What a step may write into the user's work tree when it lands: its new content is measured
from git's objects (never materialised) against limits, before the base moves.

One small blob committed under many names, or a subtree repeated at every level, is a tiny
bundle that would fill the disk once checked out. So the trees are read one object at a time
from `git cat-file`, each distinct tree once (its totals are remembered: a folder repeated a
thousand times is added up, not walked a thousand times), only where the two sides differ,
and the measure stops as soon as a limit is crossed. (`git diff-tree` would first list every
path, however many.)
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sandbox_runner.console.units import byte_limit
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import GitError, git_process

DEFAULT_MAX_MERGE_BYTES = 1024**3
DEFAULT_MAX_MERGE_FILES = 100_000
DEFAULT_MAX_MERGE_DEPTH = 100
MAX_DEPTH = 500
MAX_PATH_BYTES = 4096
"""A longer path cannot be created (PATH_MAX), so none is merged."""
MAX_TREE_BYTES = 8 * 1024 * 1024
"""A folder whose listing (one tree object) is bigger is not read."""
TREE = b"40000"
GITLINK = b"160000"


@dataclass(frozen=True)
class MergeLimits:
    """The most a landing may write into the base (FKS_MAX_MERGE_* override each)."""

    bytes: int = DEFAULT_MAX_MERGE_BYTES
    """Total size of the files it adds or changes (a blob counts once per path)."""
    files: int = DEFAULT_MAX_MERGE_FILES
    """Files and folders it adds or changes (and entries it removes)."""
    depth: int = DEFAULT_MAX_MERGE_DEPTH
    """Names in one path, the file's included (at most MAX_DEPTH)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> MergeLimits:
        def value(name: str, default: int) -> int:
            raw = environ.get(name, "").strip()
            return int(raw) if raw.isdigit() and int(raw) > 0 else default

        return cls(
            bytes=value("FKS_MAX_MERGE_BYTES", DEFAULT_MAX_MERGE_BYTES),
            files=value("FKS_MAX_MERGE_FILES", DEFAULT_MAX_MERGE_FILES),
            depth=min(value("FKS_MAX_MERGE_DEPTH", DEFAULT_MAX_MERGE_DEPTH), MAX_DEPTH),
        )


@dataclass(frozen=True)
class Measured:
    """What moving from one tree to another would write, as far as it was read."""

    over: str | None = None
    """The limit crossed (reading stopped there), as a reason for the user."""
    owned: tuple[str, ...] = ()
    """Up to two changed paths under fks's records directory."""
    attributes: tuple[str, ...] = ()
    """Up to two `.gitattributes` files added, changed or removed: they change what git writes
    for a blob on checkout (`ident`, `eol=crlf`, `working-tree-encoding=UTF-32LE` turn a blob
    measured at 60 KB into 2.3 MB of file), so what was measured would not bound it."""


ATTRIBUTES = ".gitattributes"


def measure(repo: Repo, old: str, new: str, limits: MergeLimits, records: str) -> Measured:
    """What going from commit `old` to `new` writes into a work tree: files, bytes, path depth,
    and paths under a `records` (`.forge`) directory; stops at the first limit crossed."""
    with git_process(repo.top, "cat-file", "--batch-command", stdin=True) as cat:
        walk = _Walk(Objects(cat), limits, records)
        try:
            found = walk.diff(walk.objects.tree_of(old), walk.objects.tree_of(new), 1)
        except OverLimit as over:
            return Measured(over=str(over))
    return Measured(owned=found.owned, attributes=found.attributes)


class OverLimit(Exception):
    """A limit is crossed: the reason for the user."""

    def __init__(self, what: str, name: str | None) -> None:
        super().__init__(
            f"it {what} (FKS_MAX_MERGE_{name}); review the branch, and raise "
            f"FKS_MAX_MERGE_{name} if that is meant"
            if name
            else f"it {what}, which fks never merges; review the branch"
        )


@dataclass(frozen=True)
class _Stats:
    """What a folder (or one entry) writes: counts, and its longest path below it."""

    files: int = 0
    bytes: int = 0
    depth: int = 0
    longest: int = 0
    owned: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()


Entry = tuple[bytes, bytes, str]
"""A tree's entry: mode, name, object id."""


class Objects:
    """Trees and blob sizes from one `git cat-file --batch-command`, one object at a time."""

    def __init__(self, cat: subprocess.Popen[bytes]) -> None:
        assert cat.stdin is not None and cat.stdout is not None
        self._in, self._out = cat.stdin, cat.stdout
        self._sizes: dict[str, int] = {}

    def _ask(self, command: str, name: str) -> tuple[str, bytes, int]:
        """The id, type and size of the object `name` names (its content follows for
        `contents`)."""
        self._in.write(f"{command} {name}\n".encode())
        self._in.flush()
        answer = self._out.readline(256).split()
        if len(answer) != 3 or not answer[2].isdigit():
            raise GitError(f"git cat-file cannot read {name[:60]}: {b' '.join(answer[1:])!r}")
        return answer[0].decode(), answer[1], int(answer[2])

    def tree_of(self, commit: str) -> str:
        return self._ask("info", f"{commit}^{{tree}}")[0]

    def size(self, oid: str) -> int:
        if oid not in self._sizes:
            self._sizes[oid] = self._ask("info", oid)[2]
        return self._sizes[oid]

    def tree(self, oid: str) -> list[Entry]:
        _oid, kind, size = self._ask("contents", oid)
        if kind != b"tree":
            raise GitError(f"object {oid[:12]} is not a tree")
        if size > MAX_TREE_BYTES:
            raise OverLimit(
                f"has a folder listing over {byte_limit(MAX_TREE_BYTES)} of names", None
            )
        data = self._out.read(size + 1)
        width = 20 if len(oid) == 40 else 32
        entries: list[Entry] = []
        at = 0
        while at < size:
            space, nul = data.index(b" ", at), data.index(b"\0", at)
            oid_bytes = data[nul + 1 : nul + 1 + width]
            entries.append((data[at:space], data[space + 1 : nul], oid_bytes.hex()))
            at = nul + 1 + width
        return entries


class _Walk:
    """Adds up what trees write, each distinct tree (or pair of trees) once."""

    def __init__(self, objects: Objects, limits: MergeLimits, records: str) -> None:
        self.objects = objects
        self._limits = limits
        self._records = records
        self._full: dict[str, _Stats] = {}
        self._diffs: dict[tuple[str, str], _Stats] = {}

    def full(self, tree: str, level: int) -> _Stats:
        """All that a new folder writes."""
        if tree not in self._full:
            total = _Stats()
            for mode, name, oid in self.objects.tree(tree):
                total = self._add(total, name, self._entry(mode, oid, level))
            self._full[tree] = total
        return self._full[tree]

    def diff(self, old: str, new: str, level: int) -> _Stats:
        """What replacing folder `old` by `new` writes."""
        key = (old, new)
        if key not in self._diffs:
            before = {name: (mode, oid) for mode, name, oid in self.objects.tree(old)}
            total = _Stats()
            for mode, name, oid in self.objects.tree(new):
                was = before.pop(name, None)
                if was == (mode, oid):
                    continue
                if mode == TREE and was is not None and was[0] == TREE:
                    self._deeper(level)
                    child = self.diff(was[1], oid, level + 1)
                else:
                    child = self._entry(mode, oid, level)
                total = self._add(total, name, child)
            for name in before:  # removed
                total = self._add(total, name, _Stats(files=1, depth=1))
            self._diffs[key] = total
        return self._diffs[key]

    def _entry(self, mode: bytes, oid: str, level: int) -> _Stats:
        if mode == TREE:
            self._deeper(level)
            inner = self.full(oid, level + 1)
            return replace(inner, files=inner.files + 1, depth=inner.depth + 1)
        size = 0 if mode == GITLINK else self.objects.size(oid)
        return _Stats(files=1, bytes=size, depth=1)

    def _deeper(self, level: int) -> None:
        if level >= self._limits.depth:
            raise OverLimit(f"has paths over {self._limits.depth} names deep", "DEPTH")

    def _add(self, total: _Stats, name: bytes, child: _Stats) -> _Stats:
        """`total` with entry `name` (what `child` writes) added; OverLimit at a limit crossed."""
        text = name.decode("utf-8", "replace")
        owned = (text,) if _is(text, self._records) else tuple(f"{text}/{p}" for p in child.owned)
        attributes = (
            (text,) if _is(text, ATTRIBUTES) else tuple(f"{text}/{p}" for p in child.attributes)
        )
        longest = len(name) + (1 + child.longest if child.longest else 0)
        added = _Stats(
            files=total.files + child.files,
            bytes=total.bytes + child.bytes,
            depth=max(total.depth, child.depth),
            longest=max(total.longest, longest),
            owned=(*total.owned, *owned)[:2],
            attributes=(*total.attributes, *attributes)[:2],
        )
        limits = self._limits
        if added.files > limits.files:
            raise OverLimit(f"changes more than {limits.files} files and folders", "FILES")
        if added.bytes > limits.bytes:
            raise OverLimit(f"writes more than {byte_limit(limits.bytes)} of files", "BYTES")
        if added.depth > limits.depth:
            raise OverLimit(f"has paths over {limits.depth} names deep", "DEPTH")
        if added.longest > MAX_PATH_BYTES:
            raise OverLimit(f"has paths over {MAX_PATH_BYTES} bytes long", None)
        return added


def _is(name: str, records: str) -> bool:
    return name.lower().rstrip(". ") == records
