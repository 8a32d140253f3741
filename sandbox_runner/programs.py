"""Starting programs on the host without taking anything from the directory they run in.

fks runs most things with a repository as the working directory, and a repository's files may
have been written by an agent (landed commits) or by whoever published a cloned repository. So
a program fks starts is never found through an empty or relative `PATH` entry (which names the
working directory), and fks's own Python processes never put the working directory (nor a
relative `PYTHONPATH` entry) on their module path.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path


def absolute_entries(value: str | None) -> str:
    """A search path (`PATH`, `PYTHONPATH`) with its empty and relative entries left out."""
    return os.pathsep.join(p for p in (value or "").split(os.pathsep) if Path(p).is_absolute())


_found: dict[tuple[str, str], str] = {}


def find_program(name: str, *, outside: Path | None = None) -> str | None:
    """`name` as an absolute path, looked up in `PATH`'s absolute entries only (None: not
    there). Once found, the same path is used for as long as `PATH` stays the same.

    With `outside` (the folder the program will run in), no entry inside a git work tree that
    folder is in is searched: a repository's own `bin/` or activated `.venv/bin` holds what
    its commits put there."""
    path = absolute_entries(os.environ.get("PATH", os.defpath))
    if outside is not None:
        path = _outside_work_trees(path, _work_trees(outside))
    if (name, path) not in _found:
        found = shutil.which(name, path=path)  # absolute: every entry searched is
        if found is None:
            return None
        _found[name, path] = found
    return _found[name, path]


def _work_trees(folder: Path) -> tuple[str, ...]:
    """The git work trees `folder` is in: it and each folder above it holding a `.git`."""
    try:
        start = folder.resolve()
    except (OSError, RuntimeError):  # a loop of links: no folder to leave out
        return ()
    return tuple(str(f) for f in (start, *start.parents) if os.path.lexists(f / ".git"))


@functools.lru_cache(maxsize=64)
def _outside_work_trees(path: str, trees: tuple[str, ...]) -> str:
    if not trees:
        return path
    return os.pathsep.join(
        entry
        for entry in path.split(os.pathsep)
        if not any(_under(os.path.realpath(entry), tree) for tree in trees)
    )


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def host_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the environment, by default) as the programs fks starts get it: `PATH` and
    `PYTHONPATH` without their empty and relative entries."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = absolute_entries(env.get("PATH", os.defpath))
    if "PYTHONPATH" in env:
        if kept := absolute_entries(env["PYTHONPATH"]):
            env["PYTHONPATH"] = kept
        else:
            del env["PYTHONPATH"]
    return env


def fks_python(module: str, *args: str) -> list[str]:
    """The command that runs `python -m module args` with this Python, never importing from
    the working directory (`-P`): a landed `inspect.py` or `sandbox_runner/` there stays a file."""
    return [sys.executable, "-P", "-m", module, *args]


def drop_relative_path() -> None:
    """Leave `PATH`'s empty and relative entries out of this process's environment, so that
    nothing fks starts (git's helpers, a browser, agents) finds a program through them."""
    if "PATH" in os.environ:
        os.environ["PATH"] = absolute_entries(os.environ["PATH"])
