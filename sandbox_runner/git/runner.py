"""Quick git queries with plain subprocesses (no GitPython import on these paths): where a work
tree and its git directory are, and whether an iteration made progress — a fingerprint of HEAD
plus the state of every changed or untracked file, from one `git status` call.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        env={**os.environ, **_GIT_ENV},
        check=False,
    )


def _rev_parse_path(path: Path, *args: str) -> Path | None:
    try:
        done = _git(path, "rev-parse", *args)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if done.returncode != 0:
        return None
    return Path(os.fsdecode(done.stdout.strip()))


def git_toplevel(path: Path) -> Path | None:
    """The work tree `path` is in, or None outside git (or without git installed)."""
    return _rev_parse_path(path, "--show-toplevel")


def git_common_dir(path: Path) -> Path | None:
    """The repository's shared git directory (`.git` of the main work tree), or None."""
    return _rev_parse_path(path, "--path-format=absolute", "--git-common-dir")


def workspace_fingerprint(top: Path) -> str | None:
    """A digest that changes when a commit is made or any file is changed, added or removed.

    `top` is the work tree's top directory (git prints paths relative to it).
    """
    done = _git(top, "status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all")
    if done.returncode != 0:
        return None
    digest = hashlib.sha1(done.stdout)
    for entry in done.stdout.split(b"\0"):
        if not entry or entry.startswith(b"#"):
            continue
        # The path is the last space-separated field (renames put the origin in the next entry).
        name = entry.rsplit(b" ", 1)[-1] if entry[:1] in (b"1", b"2", b"u") else entry[2:]
        try:
            st = os.lstat(top / os.fsdecode(name))
        except OSError:
            continue
        digest.update(f"{st.st_mtime_ns}:{st.st_size}".encode())
    return digest.hexdigest()
