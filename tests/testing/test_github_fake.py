"""The fake of GitHub's REST API answers as GitHub does: the tests of pull requests rely on it."""

from __future__ import annotations

from pathlib import Path

import httpx
from fks_testing.github import REPO, TOKEN, FakeGitHub, github_remote
from fks_testing.helpers import git, init_repo


def test_it_answers_as_github_does(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "project")
    github_remote(project, tmp_path / "remote.git")
    git(project, "push", "-q", "origin", "main:topic")
    git(project, "commit", "-q", "--allow-empty", "-m", "more")
    git(project, "push", "-q", "origin", "main:ahead")
    sha = git(project, "rev-parse", "main")
    with FakeGitHub({REPO: tmp_path / "remote.git"}, {TOKEN: True}) as github:
        auth = {"Authorization": f"token {TOKEN}"}
        api = httpx.Client(base_url=f"{github.url}/api/v3/repos/{REPO}", headers=auth)
        assert httpx.get(f"{github.url}/repos/{REPO}").status_code == 401
        assert api.get("").json()["permissions"]["push"] is True
        assert api.get("/branches/nope").status_code == 404
        same = api.post("/pulls", json={"head": "topic", "base": "main", "title": "t"})
        assert same.status_code == 422 and "No commits between" in same.text
        made = api.post("/pulls", json={"head": "ahead", "base": "main", "draft": True})
        assert made.status_code == 201 and made.json()["head"]["sha"] == sha
        again = api.post("/pulls", json={"head": "ahead", "base": "main"})
        assert again.status_code == 422 and "A pull request already exists" in again.text
        assert len(api.get("/pulls", params={"head": "ahead"}).json()) == 1  # owner left out
        assert api.get("/pulls", params={"head": "acme:topic"}).json() == []
        assert api.post("/issues/1/comments", json={"body": "hi"}).status_code == 201
        assert api.post(f"/statuses/{sha}", json={"state": "success"}).status_code == 201
        github.fail("GET", r"/pulls$", 502)
        assert api.get("/pulls").status_code == 502 and api.get("/pulls").status_code == 200
        github.secondary_rate_limit("GET", r"$", retry_after=7)
        limited = api.get("")
        assert limited.status_code == 403 and limited.headers["retry-after"] == "7"
        github.primary_rate_limit("GET", r"$")
        assert api.get("").headers["x-ratelimit-remaining"] == "0"
    assert github.repos[REPO].comments[1] == [{"id": 1, "body": "hi"}]
    assert github.repos[REPO].statuses[sha] == [{"state": "success"}]
