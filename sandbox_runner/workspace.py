"""Git plumbing for runs: keeping `.forge/` out of git, step worktrees and branches, merge-back."""

from __future__ import annotations

import subprocess
from pathlib import Path

FORGE_EXCLUDE = ".forge/"


def git_common_dir(path: Path) -> Path | None:
    """The repository's shared git directory (`.git` of the main work tree), or None."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=path,
            capture_output=True,
            text=True,
            check=False,
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    if done.returncode != 0:
        return None
    return Path(done.stdout.strip())


def exclude_forge_dir(project: Path) -> None:
    """Add `.forge/` to the repository's `info/exclude` (never to a tracked .gitignore)."""
    common = git_common_dir(project)
    if common is None:
        return
    exclude = common / "info" / "exclude"
    try:
        current = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    if any(line.strip() in (".forge", ".forge/", "/.forge", "/.forge/") for line in current.splitlines()):
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not current or current.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as out:
        out.write(f"{prefix}# fks run records and step worktrees\n{FORGE_EXCLUDE}\n")
