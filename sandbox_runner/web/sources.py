"""Where `fks ui` reads from: the run stores of one project, or of every project with fks
records on this machine (`--all`: the projects fks has run in, listed in its state file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandbox_runner.records.projects import known_projects
from sandbox_runner.records.record import RunRecord
from sandbox_runner.records.store import RunStore
from sandbox_runner.web.cache import RecordCache


@dataclass(frozen=True)
class Sources:
    """The projects `fks ui` shows."""

    projects: tuple[Path, ...]
    every: bool = False
    """Every project with fks records on this machine (`--all`)."""
    cache: RecordCache = field(default_factory=RecordCache, compare=False, repr=False)
    """Parsed run records, kept while their files stay the same."""

    @classmethod
    def everywhere(cls) -> Sources:
        found = [Path(p) for p in known_projects()]
        return cls(tuple(p for p in found if (p / ".forge" / "runs").is_dir()), every=True)

    def stores(self) -> list[RunStore]:
        return [RunStore(project) for project in self.projects]

    def store_of(self, project: int) -> RunStore:
        return RunStore(self.projects[project])

    def runs(self) -> list[tuple[int, RunRecord]]:
        """(project index, record) of every readable run, the newest first."""
        found: list[tuple[int, RunRecord]] = []
        for n, store in enumerate(self.stores()):
            found += [(n, record) for record in self.cache.records(store)]
        return sorted(found, key=lambda item: (item[1].started, item[1].id), reverse=True)
