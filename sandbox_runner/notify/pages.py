"""Where a notification links to: the page of a running `fks ui` that serves the project.

`fks ui` says where it serves, while it serves, in a file of fks's per-user state
(`$XDG_STATE_HOME/fks/ui/PID.json`: its address, never its token, and the projects in the
order its pages number them); a notification links to a page only while that process lives.
Opening the link needs the browser that has opened `fks ui` (its cookie): the token never
leaves this machine in a notification."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from sandbox_runner.bounded import load_json
from sandbox_runner.records.projects import state_dir
from sandbox_runner.signals import pid_alive

_ORIGIN = re.compile(r"http://fks-[0-9a-f]{32}\.localhost:[0-9]{1,5}")
_LIMIT = 1 << 20


def _folder() -> Path:
    return state_dir() / "ui"


@contextlib.contextmanager
def published(origin: str, projects: Sequence[Path]) -> Iterator[None]:
    """While the block runs, notifications of `projects` link to pages under `origin` (best
    effort: `fks ui` serves whether or not the file can be written)."""
    path = _folder() / f"{os.getpid()}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps({"origin": origin, "projects": [str(p) for p in projects]})
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
    except OSError:
        pass
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def page(project: Path, path: str) -> str | None:
    """The address of `path` (`/runs/{project}/RUN`, `/forge/{project}`: `{project}` is the
    project's number there) on a live `fks ui` that serves `project`, else None."""
    for origin, projects in _serving():
        if str(project) in projects:
            return origin + path.replace("{project}", str(projects.index(str(project))))
    return None


def _serving() -> Iterator[tuple[str, list[str]]]:
    try:
        files = sorted(_folder().glob("*.json"))
    except OSError:
        return
    for file in files:
        if not file.stem.isdigit() or not pid_alive(int(file.stem)):
            continue
        try:
            with file.open("rb") as handle:
                data = load_json(handle.read(_LIMIT), max_bytes=_LIMIT)
        except (OSError, ValueError):
            continue
        origin = data.get("origin") if isinstance(data, dict) else None
        projects = data.get("projects") if isinstance(data, dict) else None
        if isinstance(origin, str) and _ORIGIN.fullmatch(origin) and isinstance(projects, list):
            yield origin, [p for p in projects if isinstance(p, str)]
