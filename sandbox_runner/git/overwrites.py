"""What a landing must leave alone: the files of the user's checkout that git does not track,
ignored ones included (`git merge` overwrites and deletes those without a word), and the files
`sandbox.secrets` and `sandbox.caCerts` read (the next run would send what a branch put there).

Both are found from git's objects, one tree at a time and only where the two commits differ,
and the checkout is looked at only where the merge writes: `lstat` on a name in a folder opened
without following links. The work is bounded by what the landing changes, which
`sandbox_runner.git.limits` bounded first.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_runner.git.limits import GITLINK, TREE, Objects
from sandbox_runner.git.repo import Repo
from sandbox_runner.git.runner import git_process, run_git

NAMED = 50
"""Paths in the way kept by name; the rest are only counted."""
MAX_LOOKED_AT = 100_000
"""Entries of the user's folders read where the merge replaces a tracked folder by a file;
past them the folder itself is named (it may hold more)."""
_STAGED_BYTES = 4 * 1024 * 1024
_ADDED_BYTES = 16 * 1024 * 1024
"""Bytes of the names a landing adds read at most (its files are bounded: 100,000 by default)."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class InTheWay:
    """The user's files, untracked or ignored, that a landing would write over or delete."""

    paths: list[str] = field(default_factory=list)
    """The first NAMED of them (a folder ends in `/`)."""
    count: int = 0

    def add(self, path: bytes, *, folder: bool) -> None:
        self.count += 1
        if len(self.paths) < NAMED:
            self.paths.append(path.decode("utf-8", "backslashreplace") + ("/" if folder else ""))


def in_the_way(checkout: Path, old: str, new: str, *, skip: Sequence[str] = ()) -> InTheWay:
    """What moving the checkout at `checkout` from commit `old` to `new` would write over or
    delete of what git does not track there (what git tracks, git's own merge checks), but
    the paths `skip` names."""
    found = InTheWay()
    with git_process(checkout, "cat-file", "--batch-command", stdin=True) as cat:
        objects = Objects(cat)
        skipped = _staged_additions(checkout, old) | {os.fsencode(p) for p in skip}
        finder = _Finder(objects, skipped, found)
        top = os.open(checkout, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            finder.diff(objects.tree_of(old), objects.tree_of(new), top, b"")
        finally:
            os.close(top)
    return found


def ignored_additions(checkout: Path, old: str, new: str) -> InTheWay:
    """The files moving the checkout at `checkout` from commit `old` to `new` adds at paths
    the checkout ignores (`.gitignore`, `info/exclude`, your global excludes, as they are
    before the landing): an agent's `git add -f` of `.venv/bin/git` or a `.pth` into your
    ignored `.venv` would otherwise arrive beside your own files without a word. More added
    names than `_ADDED_BYTES` hold are all taken as ignored: nothing is decided unread."""
    found = InTheWay()
    added = run_git(
        checkout,
        "diff",
        "--no-renames",
        "--name-only",
        "-z",
        "--diff-filter=A",
        old,
        new,
        limit=_ADDED_BYTES,
    )
    if added.returncode != 0 or len(added.stdout) > _ADDED_BYTES:
        found.add(b"(more added files than fks checks)", folder=False)
        return found
    names = added.stdout
    if not names:
        return found
    with tempfile.TemporaryFile() as listed:
        listed.write(names)
        listed.seek(0)
        ignored = run_git(
            checkout,
            "check-ignore",
            "--no-index",
            "-z",
            "--stdin",
            stdin=listed,
            limit=_ADDED_BYTES,
        )
    for path in ignored.stdout[:_ADDED_BYTES].split(b"\0"):
        if path:
            found.add(path, folder=False)
    return found


def _staged_additions(checkout: Path, old: str) -> frozenset[bytes]:
    """Paths the user added to the index but did not commit: git's merge decides on those."""
    done = run_git(
        checkout,
        "diff",
        "--cached",
        "--no-renames",
        "--name-only",
        "-z",
        "--diff-filter=A",
        old,
        limit=_STAGED_BYTES,
    )
    # Past the limit (or on an error) fewer are known: more is named, nothing is lost.
    return frozenset(p for p in done.stdout[:_STAGED_BYTES].split(b"\0") if p)


class _Full(Exception):
    """MAX_LOOKED_AT entries of the user's folders were read."""


class _Finder:
    """Walks the trees the merge changes beside the checkout's folders."""

    def __init__(self, objects: Objects, skipped: frozenset[bytes], found: InTheWay) -> None:
        self._objects = objects
        self._skipped = skipped
        """Paths git decides on (added to the index) or that are named already."""
        self._found = found
        self._looked = 0

    def diff(self, old: str | None, new: str, fd: int, prefix: bytes) -> None:
        """The folder open as `fd` (tree `old` at the base, None: untracked) becomes `new`."""
        before = {name: (mode, oid) for mode, name, oid in self._objects.tree(old)} if old else {}
        for mode, name, oid in self._objects.tree(new):
            was = before.get(name)
            if was == (mode, oid):
                continue
            path = prefix + name
            if was is not None:  # tracked: git checks it against the user's changes
                if was[0] == TREE:
                    self._tracked_folder(fd, name, path, was[1], oid if mode == TREE else None)
                elif was[0] == GITLINK and mode != GITLINK and _holds_files(fd, name):
                    self._found.add(path, folder=True)  # a submodule's checkout
                continue
            if path in self._skipped:
                continue
            kind = _kind(fd, name)
            if kind == "folder" and mode == TREE:
                self._into(fd, name, path, None, oid)
            elif kind is not None:
                self._found.add(path, folder=kind == "folder")

    def _tracked_folder(self, fd: int, name: bytes, path: bytes, old: str, new: str | None) -> None:
        """A tracked folder that changes (`new`), or that a file replaces (None): git deletes
        what it holds then, the files it ignores too."""
        kind = _kind(fd, name)
        if kind is None:
            return  # the user removed it: nothing of theirs there
        if kind != "folder":
            self._found.add(path, folder=False)  # the user's own file where git has a folder
        elif new is not None:
            self._into(fd, name, path, old, new)
        else:
            inner = _open(fd, name)
            try:
                self._untracked_in(inner, path + b"/", old)
            except _Full:
                self._found.add(path, folder=True)
            finally:
                os.close(inner)

    def _into(self, fd: int, name: bytes, path: bytes, old: str | None, new: str) -> None:
        inner = _open(fd, name)
        try:
            self.diff(old, new, inner, path + b"/")
        finally:
            os.close(inner)

    def _untracked_in(self, fd: int, prefix: bytes, tree: str) -> None:
        """Name what the folder open as `fd` holds that its tree `tree` does not."""
        tracked = {name: (mode, oid) for mode, name, oid in self._objects.tree(tree)}
        for name in sorted(os.fsencode(n) for n in os.listdir(fd)):
            self._looked += 1
            if self._looked > MAX_LOOKED_AT:
                raise _Full
            kind, entry = _kind(fd, name), tracked.get(name)
            if kind is None or prefix + name in self._skipped:
                continue
            if entry is None:
                self._found.add(prefix + name, folder=kind == "folder")
            elif entry[0] == TREE and kind == "folder":
                inner = _open(fd, name)
                try:
                    self._untracked_in(inner, prefix + name + b"/", entry[1])
                finally:
                    os.close(inner)
            elif entry[0] == GITLINK and _holds_files(fd, name):
                self._found.add(prefix + name, folder=True)


def _kind(fd: int, name: bytes) -> str | None:
    """`folder`, `file` (anything else, a link included) or None: nothing there."""
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            return None
        return "file"  # there, but unreadable: taken as the user's
    return "folder" if stat.S_ISDIR(mode) else "file"


def _holds_files(fd: int, name: bytes) -> bool:
    """`name` in `fd` is a folder (not a link) with something in it."""
    if _kind(fd, name) != "folder":
        return False
    inner = _open(fd, name)
    try:
        with os.scandir(inner) as entries:
            return next(entries, None) is not None
    finally:
        os.close(inner)


def _open(fd: int, name: bytes) -> int:
    """The folder `name` in `fd`, never through a link (`_kind` said it is a folder)."""
    return os.open(name, _DIR, dir_fd=fd)


def changed_files(repo: Repo, old: str, new: str, files: Sequence[str]) -> list[str]:
    """Which of `files` (paths relative to the repository's top) going from commit `old` to
    `new` adds, changes or removes, or puts a file or link on the way to."""
    if not files:
        return []
    changed = []
    with git_process(repo.top, "cat-file", "--batch-command", stdin=True) as cat:
        objects = Objects(cat)
        trees = objects.tree_of(old), objects.tree_of(new)
        for path in files:
            parts = [os.fsencode(p) for p in path.split("/")]
            before, after = (_along(objects, tree, parts) for tree in trees)
            on_the_way = zip(before[:-1], after[:-1], strict=True)
            if before[-1] != after[-1] or any(
                a is not None and a[0] != TREE and a != b for b, a in on_the_way
            ):
                changed.append(path)
    return changed


def _along(objects: Objects, tree: str, parts: list[bytes]) -> list[tuple[bytes, str] | None]:
    """The entry (mode, object) at each folder on the way to a path, and at the path."""
    entries: list[tuple[bytes, str] | None] = []
    current: str | None = tree
    for part in parts:
        entry = None
        if current is not None:
            entry = next(((m, o) for m, n, o in objects.tree(current) if n == part), None)
        entries.append(entry)
        current = entry[1] if entry is not None and entry[0] == TREE else None
    return entries
