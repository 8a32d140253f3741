"""Pushing a landed branch and opening its pull request, against the fake of GitHub's REST API
with a real bare repository as the remote: one pull request per head, updated when run again,
GitHub's errors and rate limits as GitHub answers them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.github import REPO, TOKEN, FakeGitHub, github_remote
from fks_testing.helpers import git, init_repo

from sandbox_runner.pulls.publish import publish
from sandbox_runner.pulls.target import PrTarget

BRANCH = "fks/pr/ralph"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "project")
    github_remote(path, tmp_path / "remote.git")
    git(path, "checkout", "-q", "-b", BRANCH)
    (path / "work.txt").write_text("work\n")
    git(path, "add", "work.txt")
    git(path, "commit", "-qm", "agent: work")
    git(path, "checkout", "-q", "main")
    return path


@pytest.fixture
def github(tmp_path: Path, project: Path) -> Iterator[FakeGitHub]:
    with FakeGitHub({REPO: tmp_path / "remote.git"}, {TOKEN: True, "readonly": False}) as fake:
        yield fake


def target(api: str, token: str = TOKEN, branch: str = BRANCH) -> PrTarget:
    return PrTarget(REPO, api, "origin", branch, "main", True, token)


def test_opens_one_draft_then_updates_it(project: Path, github: FakeGitHub) -> None:
    first = publish(target(github.url), project=project, title="T", body="B1", notice=print)
    assert first.error is None and first.number == 1 and first.state == "draft", first
    (pull,) = github.pulls(REPO)
    assert pull["draft"] is True and pull["head"]["ref"] == BRANCH and pull["base"]["ref"] == "main"
    assert pull["head"]["sha"] == git(project, "rev-parse", BRANCH)  # pushed
    git(project, "commit", "-q", "--allow-empty", "-m", "more", "--no-verify")
    again = publish(target(github.url), project=project, title="T2", body="B2", notice=print)
    assert again.number == 1 and again.error is None
    (pull,) = github.pulls(REPO)
    assert pull["body"] == "B2" and pull["title"] == "T2"
    lists = [r.path for r in github.requests if r.method == "GET" and "/pulls" in r.path]
    assert all(f"head=acme%3A{BRANCH.replace('/', '%2F')}" in p for p in lists), lists


def test_502_then_success(project: Path, github: FakeGitHub) -> None:
    github.fail("POST", r"/pulls$", 502)
    waits: list[str] = []
    pull = publish(target(github.url), project=project, title="T", body="B", notice=waits.append)
    assert pull.number == 1 and pull.error is None
    assert waits and "502" in waits[0]
    assert len(github.pulls(REPO)) == 1


@pytest.mark.parametrize("limit", ["secondary", "primary"])
def test_rate_limits_are_waited_out(project: Path, github: FakeGitHub, limit: str) -> None:
    if limit == "secondary":
        github.secondary_rate_limit("POST", r"/pulls$", retry_after=1)
    else:
        github.primary_rate_limit("GET", r"/pulls$", reset_in=1)
    began = time.monotonic()
    pull = publish(target(github.url), project=project, title="T", body="B", notice=print)
    assert pull.number == 1 and pull.error is None
    assert time.monotonic() - began >= 0.9  # waited as asked


def test_rate_limit_longer_than_the_bound_is_one_line(project: Path, github: FakeGitHub) -> None:
    github.secondary_rate_limit("POST", r"/pulls$", retry_after=3600)
    pull = publish(target(github.url), project=project, title="T", body="B", notice=print)
    assert pull.error is not None and "rate limited" in pull.error and "\n" not in pull.error
    assert github.pulls(REPO) == []


def test_401_is_one_line_and_the_branch_stays(project: Path, github: FakeGitHub) -> None:
    pull = publish(
        target(github.url, token="nonsense-token"),
        project=project,
        title="T",
        body="B",
        notice=print,
    )
    assert pull.error is not None and "401" in pull.error and "\n" not in pull.error
    assert "nonsense-token" not in pull.error
    assert pull.head == BRANCH and git(project, "rev-parse", "--verify", BRANCH)


def test_already_exists_updates_the_open_one(project: Path, github: FakeGitHub) -> None:
    publish(target(github.url), project=project, title="T", body="B1", notice=print)
    github.fail("GET", r"/pulls$", 200, body=[])  # type: ignore[arg-type]  # a stale list
    again = publish(target(github.url), project=project, title="T", body="B2", notice=print)
    assert again.number == 1 and again.error is None
    assert [p["body"] for p in github.pulls(REPO)] == ["B2"]


def test_no_commits_is_a_note_not_an_error(project: Path, github: FakeGitHub) -> None:
    git(project, "branch", "fks/pr/empty", "main")
    pull = publish(
        target(github.url, branch="fks/pr/empty"),
        project=project,
        title="T",
        body="B",
        notice=print,
    )
    assert pull.error is None and pull.number is None and "no commits" in (pull.note or "")


def test_the_token_goes_only_to_github_and_git(project: Path, github: FakeGitHub) -> None:
    publish(target(github.url), project=project, title="T", body="B", notice=print)
    for request in github.requests:
        assert request.header("Authorization") == [f"Bearer {TOKEN}"]
        assert TOKEN.encode() not in request.body and TOKEN not in request.path
    assert TOKEN not in (project / ".git" / "config").read_text()
