"""The git identity fks gives the commits it and the agent make: the user's (the last value of
each key, as git itself reads it), else the author variables, else fks's fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import git, init_repo

from sandbox_runner.git.repo import FALLBACK_IDENTITY, identity_env, open_repo


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with no identity from the machine's own git config."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(name, raising=False)
    return init_repo(tmp_path / "repo")


def test_the_repositorys_identity_last_value_wins(isolated: Path) -> None:
    git(isolated, "config", "--add", "user.name", "Second  Name ")
    git(isolated, "config", "user.email", "me@example.org")
    env = identity_env(open_repo(isolated))
    assert env["GIT_AUTHOR_NAME"] == env["GIT_COMMITTER_NAME"] == "Second  Name "
    assert env["GIT_AUTHOR_EMAIL"] == env["GIT_COMMITTER_EMAIL"] == "me@example.org"


def test_without_one_the_author_variables_then_the_fallback(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(isolated, "config", "--unset-all", "user.name")
    git(isolated, "config", "--unset-all", "user.email")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "From Env")
    env = identity_env(open_repo(isolated))
    assert (env["GIT_AUTHOR_NAME"], env["GIT_AUTHOR_EMAIL"]) == ("From Env", FALLBACK_IDENTITY[1])
