"""The Docker tests' shared fixture: a test repository to run `fks run --sandbox` in."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import init_repo
from fks_testing.sandboxed import COMMIT_AGENT, add_script, configure


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    add_script(path, "commit.sh", COMMIT_AGENT)
    configure(path, {})
    monkeypatch.chdir(path)
    return path
