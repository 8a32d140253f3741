"""Where fks keeps its files in a project: `.forge/` and what is under it. Imports nothing from
the package, so that `git` can keep `.forge/` out of the user's repository by the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_FORGE_DIR = ".forge"
_RUNS_DIR = "runs"


@dataclass(frozen=True)
class ForgeLayout:
    """Where fks keeps its files in a project: `.forge/` and everything under it."""

    project: Path

    @property
    def root(self) -> Path:
        return self.project / _FORGE_DIR

    @property
    def runs(self) -> Path:
        """One directory per run: `run.json` and the iteration logs."""
        return self.root / _RUNS_DIR

    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def lock(self, name: str) -> Path:
        """The lock file of one base branch (`name` already made file-name safe)."""
        return self.root / "locks" / f"{name}.lock"

    @property
    def legacy_dirs(self) -> tuple[Path, ...]:
        """`.forge/sandbox` and `.forge/worktrees`, made by older versions of fks."""
        return (self.root / "sandbox", self.root / "worktrees")
