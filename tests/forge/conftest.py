"""The forge tests' shared fixture: a repository to run the pipeline in, as the cwd."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import init_repo


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n", "a.txt": "zero\n"})
    monkeypatch.chdir(path)
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(key, "Test User")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "test@example.com")
    return path
