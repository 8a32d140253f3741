"""Files fks reads from the user's checkout are never followed out of the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import init_repo

from sandbox_runner.errors import ConfigError
from sandbox_runner.paths import inside_project, read_in_project


def test_symlink_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hi\n"})
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (repo / "PROMPT.md").symlink_to(secret)
    with pytest.raises(ConfigError, match="symlink that leads out of the repository"):
        read_in_project(repo / "PROMPT.md", "prompt file")


def test_symlink_inside_the_repository_and_files_outside_it_are_read(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hi\n"})
    (repo / "PROMPT.md").symlink_to(repo / "README.md")
    assert read_in_project(repo / "PROMPT.md", "prompt file") == "hi\n"
    elsewhere = tmp_path / "mine.md"  # a file the user names outside any repository
    elsewhere.write_text("mine\n")
    assert inside_project(elsewhere, "prompt file") == elsewhere.resolve()
