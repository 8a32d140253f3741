"""The projects fks has recorded runs in on this machine, for `fks ui --all`: an index in fks's
per-user state ($XDG_STATE_HOME/fks/projects.json, default ~/.local/state/fks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sandbox_runner.bounded import load_json

_INDEX_LIMIT = 1 << 20  # bytes of the index read at most


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fks"


def remember_project(top: Path) -> None:
    """Add `top` to the index (best effort: a run never fails for it)."""
    index = state_dir() / "projects.json"
    try:
        known = known_projects()
        if str(top) in known:
            return
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted({*known, str(top)}), indent=1))
        tmp.replace(index)
    except OSError:
        pass


def known_projects() -> list[str]:
    """The index's projects (none when it is missing, unreadable or malformed)."""
    try:
        with (state_dir() / "projects.json").open("rb") as handle:
            data = load_json(handle.read(_INDEX_LIMIT) or b"[]", max_bytes=_INDEX_LIMIT)
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []
