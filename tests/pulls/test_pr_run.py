"""`fks run --sandbox --pr` as a user runs it, against the fake of GitHub's REST API with a
real bare repository as `origin`: one draft pull request whose head is the landed branch, the
same one updated by the next run, and every bad setting one line before any agent runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.github import REPO, TOKEN, FakeGitHub, github_remote, token_env
from fks_testing.helpers import fks, git, init_repo, one_line_error
from fks_testing.notifysink import notify_sink
from fks_testing.sandboxed import add_script, configure, sandbox
from fks_testing.webui import ui_server

# Commits one file per iteration, and what it sees of its environment; done on iteration 2.
ENV_AGENT = """#!/bin/sh
n=$(ls work-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "work $n" > work-$n.txt; env > seen-env-$n.txt
git add work-$n.txt seen-env-$n.txt && git commit -qm "agent: work $n @acme/team"
if [ "$n" -ge 2 ]; then echo FORKHESTRA_COMPLETE; fi
"""
BRANCH = "fks/pr/agent.sh-3"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    add_script(path, "agent.sh", ENV_AGENT)
    configure(path, {})
    github_remote(path, tmp_path / "remote.git")
    monkeypatch.chdir(path)
    return path


@pytest.fixture
def github(tmp_path: Path, repo: Path) -> Iterator[FakeGitHub]:
    tokens = {TOKEN: True, "ghp_readonly_0123456789": False}
    with FakeGitHub({REPO: tmp_path / "remote.git"}, tokens) as fake:
        yield fake


@pytest.mark.docker
def test_a_sandboxed_run_opens_one_draft_and_the_next_updates_it(
    repo: Path, github: FakeGitHub
) -> None:
    env = token_env(github.url)
    github.fail("POST", r"/pulls$", 401, {"message": "Bad credentials"})  # after preflight
    first = sandbox("./scripts/agent.sh:3", "--pr", env=env)
    assert first.code == 1, first.output  # the work landed; the pull request failed
    (warning,) = [line for line in first.output.splitlines() if "not opened" in line]
    assert "401 Bad credentials" in warning and "fks pr RUN" in warning
    assert github.pulls(REPO) == []
    assert "not opened" in fks("show", "last").stdout

    retried = fks("pr", "last", env=env)
    assert retried.code == 0, retried.output
    (pull,) = json.loads(json.dumps(github.pulls(REPO)))  # as it was then
    assert pull["draft"] is True and pull["head"]["ref"] == BRANCH
    assert pull["base"]["ref"] == "main"
    assert pull["head"]["sha"] == git(repo, "rev-parse", BRANCH)
    assert "**Cost:**" in pull["body"] and "marker" in pull["body"]
    assert "`agent: work 2 @acme/team`" in pull["body"]  # in a code span: pings nobody
    assert f"Pull request #1 (draft): {pull['html_url']}" in retried.stdout
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "origin/main")  # untouched

    configure(repo, {"notify": [{"env": "PR_HOOK", "events": ["pr"]}]})
    with notify_sink() as sink:
        second = sandbox("./scripts/agent.sh:3", "--pr", env={**env, "PR_HOOK": sink.url()})
        (told,) = sink.wait_for(1)
    assert second.code == 0, second.output
    assert pull["html_url"] in told.text  # the `pr` event, with the link
    (again,) = github.pulls(REPO)
    assert again["number"] == 1 and again["body"] != pull["body"]
    assert again["head"]["sha"] == git(repo, "rev-parse", BRANCH) != pull["head"]["sha"]
    runs = sorted((repo / ".forge" / "runs").glob("*/run.json"))
    records = [json.loads(p.read_text()) for p in runs]
    assert [r["pr"]["number"] for r in records] == [1, 1]
    shown = fks("show", records[-1]["id"])
    assert pull["html_url"] in shown.stdout, shown.output
    assert "(PR #1)" in fks("runs").stdout
    with ui_server(cwd=repo) as ui, ui.client() as client:
        page = client.get(f"/runs/0/{records[-1]['id']}")
    assert f'<a href="{pull["html_url"]}" rel="noopener noreferrer">#1</a>' in page.text

    # The token: only in the Authorization header GitHub got, nowhere else.
    seen = git(repo, "show", f"{BRANCH}:seen-env-1.txt")
    assert TOKEN not in seen and "GITHUB_TOKEN" not in seen
    for path in (repo / ".forge").rglob("*"):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in first.output + retried.output + second.output
    assert all(TOKEN.encode() not in r.body for r in github.requests)
    assert TOKEN not in (repo / ".git" / "config").read_text()


@pytest.mark.parametrize(
    ("env", "edit", "fragment"),
    [
        ({"GITHUB_TOKEN": ""}, None, "no GitHub token"),
        ({"GITHUB_TOKEN": "ghp_readonly_0123456789"}, None, "may not push to acme/widgets"),
        ({"GITHUB_TOKEN": "ghp_unknown_0123456789"}, None, "401 Bad credentials"),
        (
            {},
            ("remote", "set-url", "origin", "https://gitlab.com/acme/widgets.git"),
            "not a GitHub",
        ),
        ({}, ("remote", "remove", "origin"), "no git remote 'origin'"),
        ({}, ("checkout", "-q", "-b", "topic"), "base branch 'topic' is not on GitHub"),
    ],
)
def test_bad_settings_are_one_line_before_any_agent_runs(
    repo: Path,
    github: FakeGitHub,
    env: dict[str, str],
    edit: tuple[str, ...] | None,
    fragment: str,
) -> None:
    if edit is not None:
        git(repo, *edit)
    result = sandbox("./scripts/agent.sh:3", "--pr", env={**token_env(github.url), **env})
    one_line_error(result, fragment)
    assert TOKEN not in result.output
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
