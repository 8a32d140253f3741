"""Reading and writing inside the user's checkout without following links.

A step's commits are merged into the checkout, so any path in it may be a symlink an agent
made (`forge/tasks` → a host folder). Every folder below a trusted root is opened with
`O_NOFOLLOW | O_DIRECTORY`, one component at a time, and files are opened relative to the
folder's descriptor with `O_NOFOLLOW`: a link anywhere on the way is refused, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(OSError):
    """A path component is a symlink (or not what it must be): `path` names it, `what` says
    which (`is a symlink`, `is not a folder`, ...)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(errno.ELOOP, what, str(path))
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return f"{self.path} {self.what}"


def open_dir(root: Path, relative: PurePath, *, create: bool) -> int:
    """A descriptor of `root / relative` (the caller closes it), no component below `root`
    followed if it is a link.

    `create`: make missing folders. Raises `LinkRefused` for a link or a non-folder on the way,
    FileNotFoundError when a folder is missing and not created.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    try:
        for part in relative.parts:
            here = here / part
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    link = stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode)
                    raise LinkRefused(here, "is a symlink" if link else "is not a folder") from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened_dir(root: Path, relative: PurePath, *, create: bool) -> Iterator[int]:
    """`open_dir` as a `with` block."""
    fd = open_dir(root, relative, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def read_file(dir_fd: int, name: str, path: Path, limit: int) -> bytes:
    """The bytes of the regular file `name` in `dir_fd` (at most `limit`; more raises)."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(path, "is a symlink") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LinkRefused(path, "is not a regular file")
        data = os.read(fd, limit + 1)
        while len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > limit:
        raise LinkRefused(path, f"is over {limit // 1024} KiB")
    return data


def write_file(dir_fd: int, name: str, data: bytes) -> None:
    """Replace `name` in `dir_fd` atomically by a new file (a link there is replaced, never
    written through)."""
    tmp = f".{name[:100]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
