"""Where a run record may make fks act: only in the project whose `.forge/` holds it.

A record is a file of the project's `.forge/runs/`, and a cloned repository may ship a
`.forge/` of its own: the directories a record names (its `cwd`, a step's `repo`) and the logs
it points to are never taken on trust. fks runs git, plans a resumed run and reads logs only in
the project it was pointed at (and that run's own folder), compared with links resolved.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_runner.paths import shorten


def same_place(named: str | None, project: Path) -> bool:
    """Whether `named` (a path a record holds) is `project` itself."""
    if not named or not Path(named).is_absolute():
        return False
    try:
        return Path(named).resolve() == project.resolve()
    except (OSError, RuntimeError):  # a loop of links, a name the OS refuses
        return False


def inside(named: str | None, project: Path) -> bool:
    """Whether `named` is `project` or a folder in it."""
    if not named or not Path(named).is_absolute():
        return False
    try:
        return Path(named).resolve().is_relative_to(project.resolve())
    except (OSError, RuntimeError):
        return False


def elsewhere(named: str | None, project: Path) -> str:
    """One line saying that a record names a repository that is not `project` (or is gone)."""
    if named and not Path(named).exists():
        return f"the repository {shorten(named)} no longer exists"
    return (
        f"not read: its record names the repository {shorten(str(named or '?'))}, not this "
        f"project ({shorten(str(project))}); fks reads a run's branches only in the project "
        "whose .forge/ holds its record"
    )


def log_path(run_dir: Path, log: str) -> Path | None:
    """An iteration's log, if the name its record gives leads into the run's folder."""
    if not log:
        return None
    try:
        folder = run_dir.resolve()
        path = (folder / log).resolve()
    except (OSError, RuntimeError):
        return None
    return path if path.is_relative_to(folder) and path != folder else None
