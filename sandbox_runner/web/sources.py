"""Where `fks ui` reads from: the run stores of one project, or of every project with fks
records on this machine (`--all`: the projects fks has run in, listed in its state file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.records.projects import known_projects
from sandbox_runner.records.store import RunRecord, RunStore


@dataclass(frozen=True)
class Sources:
    """The projects `fks ui` shows."""

    projects: tuple[Path, ...]

    @classmethod
    def everywhere(cls) -> Sources:
        found = [Path(p) for p in known_projects()]
        return cls(tuple(p for p in found if (p / ".forge" / "runs").is_dir()))

    def stores(self) -> list[RunStore]:
        return [RunStore(project) for project in self.projects]

    def store_of(self, project: int) -> RunStore:
        return RunStore(self.projects[project])

    def runs(self) -> list[tuple[int, RunRecord]]:
        """(project index, record) of every readable run, the newest first."""
        found: list[tuple[int, RunRecord]] = []
        for n, store in enumerate(self.stores()):
            found += [(n, record) for record in store.records()]
        return sorted(found, key=lambda item: item[1].started, reverse=True)
