"""Looking at user-given paths without crashing on ones the OS refuses (too long, loops, no access).

`Path.exists()` and friends only swallow "missing"; any other `OSError` would end as a traceback.
Also the file names fks makes: a file written whole or not at all (`write_atomic`), a name
safe in file and branch names (`slug`).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Literal

from sandbox_runner.errors import ConfigError, FksError, UsageError
from sandbox_runner.git.runner import git_toplevel

PathKind = Literal["file", "dir", "other", "missing"]
_SHOWN = 120


def shorten(text: str) -> str:
    """A user-given string cut to a readable length for a one-line message."""
    if len(text) <= _SHOWN:
        return text
    return f"{text[: _SHOWN - 40]}…{text[-30:]} ({len(text)} characters)"


CONFIG_FILE = Path("forge") / "chains.json"


def project_dir(cwd: Path | None, *, config: Path | None = None) -> Path:
    """The project directory: --cwd (or the current directory), which must be a directory.

    Without --config, a directory inside a git work tree whose config lies above it gives the
    nearest directory up to the work tree's top that holds forge/chains.json, as git finds its
    `.git`: fks behaves the same from any subdirectory of a set-up repository.
    """
    workdir = working_directory(cwd)
    return workdir if config is not None else _holding_config(workdir)


def working_directory(cwd: Path | None) -> Path:
    """--cwd (or the current directory) resolved, which must be a directory: `fks`'s and
    `forge-tasks`'s option alike."""
    workdir = (cwd or Path.cwd()).resolve()
    if path_kind(workdir, "--cwd") != "dir":
        raise UsageError(f"--cwd {shorten(str(cwd))}: not a directory")
    return workdir


def _holding_config(start: Path) -> Path:
    if path_kind(start / CONFIG_FILE, "config") != "missing":
        return start
    top = git_toplevel(start)
    if top is None:
        return start
    top = top.resolve()
    for parent in start.parents:
        if not parent.is_relative_to(top):
            break
        if path_kind(parent / CONFIG_FILE, "config") != "missing":
            return parent
    return start


def path_kind(path: Path, what: str, error: type[FksError] = UsageError) -> PathKind:
    """What is at `path` (following symlinks); raises `error` naming `what` if the OS refuses."""
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise error(f"{what}: cannot use {shorten(str(path))}: {exc.strerror}") from None
    if stat.S_ISREG(info.st_mode):
        return "file"
    return "dir" if stat.S_ISDIR(info.st_mode) else "other"


def inside_project(path: Path, what: str) -> Path:
    """`path` with symlinks resolved, refused when a link leads out of its git work tree.

    Files fks reads from the user's checkout (prompt files, system prompts, Claude config
    files) may have been turned into symlinks by a step an agent made and fks merged: such a
    file is never followed to somewhere outside the repository it lies in.
    """
    lexical = Path(os.path.normpath(Path.cwd() / path))
    resolved = lexical.resolve()
    if resolved == lexical:
        return resolved
    top = git_toplevel(lexical.parent) if lexical.parent.is_dir() else None
    if top is not None and not resolved.is_relative_to(top.resolve()):
        raise ConfigError(
            f"{what} {shorten(str(path))} is a symlink that leads out of the repository "
            f"(to {shorten(str(resolved))}); refused - replace it with a regular file"
        )
    return resolved


def read_in_project(path: Path, what: str) -> str:
    """The text of a file from the user's checkout (see `inside_project`)."""
    return inside_project(path, what).read_text(encoding="utf-8")


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and `os.replace`: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def slug(text: str) -> str:
    """A file- and branch-name-safe form of an agent name (`./bin/x.sh` → `x.sh`, `fk:builder` → `fk-builder`)."""
    name = text.rstrip("/").rsplit("/", 1)[-1].removesuffix(".md") if "/" in text else text
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:40] or "agent"
