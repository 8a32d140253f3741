"""Where fks keeps its files in a project: `.forge/` and what is under it. Imports nothing from
the package, so that `git` can keep `.forge/` out of the user's repository by the same names.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

_FORGE_DIR = ".forge"
_RUNS_DIR = "runs"
_LOCKS_DIR = "locks"
_BRANCH_LOCKS_DIR = "branches"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
        """The lock file of one of fks's own locks (`forge-work`, `forge-merge`, `in-place`).

        Branch locks live in a folder of their own, so no branch name can take one of these.
        """
        return self.root / _LOCKS_DIR / f"{name}.lock"

    def branch_lock(self, branch: str) -> Path:
        """The lock file of one base branch: a readable part of its name and a hash of all of
        it, so that two branches never share one (`a/b`, `a_b`) and any length fits."""
        digest = hashlib.sha256(branch.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        readable = _UNSAFE.sub("_", branch)[:64]
        return self.root / _LOCKS_DIR / _BRANCH_LOCKS_DIR / f"{readable}-{digest}.lock"

    @property
    def legacy_dirs(self) -> tuple[Path, ...]:
        """`.forge/sandbox` and `.forge/worktrees`, made by older versions of fks."""
        return (self.root / "sandbox", self.root / "worktrees")
