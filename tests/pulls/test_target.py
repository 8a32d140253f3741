"""Which GitHub repository a remote's URL names, and where the token comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_runner.pulls.target import find_token, github_repo

HOSTS = frozenset({"github.com", "ghe.example.com"})


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("https://github.com/acme/widgets.git", ("github.com", "acme/widgets")),
        ("https://x-access-token:secret@github.com/acme/widgets", ("github.com", "acme/widgets")),
        ("git@github.com:acme/widgets.git", ("github.com", "acme/widgets")),
        ("ssh://git@github.com/acme/widgets.git", ("github.com", "acme/widgets")),
        ("ssh://git@ghe.example.com:2222/acme/widgets.git", ("ghe.example.com", "acme/widgets")),
        ("https://gitlab.com/acme/widgets.git", ("gitlab.com", None)),
        ("https://github.com/acme/widgets/extra.git", ("github.com", None)),
        ("/srv/git/widgets.git", (None, None)),
    ],
)
def test_github_repo(url: str, found: tuple[str | None, str | None]) -> None:
    assert github_repo(url, HOSTS) == found


def test_the_token_from_the_environment_then_gh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gh = tmp_path / "gh"
    gh.write_text('#!/bin/sh\n[ "$1 $2" = "auth token" ] && echo gho_from_gh_0123456789\n')
    gh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert find_token({"GITHUB_TOKEN": "ghp_a", "GH_TOKEN": "ghp_b"}, None) == "ghp_a"
    assert find_token({"GH_TOKEN": "ghp_b"}, None) == "ghp_b"
    assert find_token({}, "github.com") == "gho_from_gh_0123456789"
    gh.write_text("#!/bin/sh\nexit 1\n")
    assert find_token({}, None) is None
