"""`forge.land: "pr"`: each approved task's branch is pushed and opened as a pull request of its
own (title from the task, body with its acceptance criteria and the review's verdict) instead of
merged here; the task is `in_pr` on the board, with the link."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from fks_testing.forge import ANALYSIS, APPROVED, answer, commit, context
from fks_testing.github import REPO, TOKEN, FakeGitHub, github_remote, token_env
from fks_testing.helpers import fks, git, one_line_error, write_config
from fks_testing.webui import ui_server

from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.work import WorkStore
from sandbox_runner.forge.worker import process_task
from sandbox_runner.pulls.target import PrTarget
from sandbox_runner.tasks.commands import create

pytestmark = pytest.mark.claude  # the stages resolve the claude CLI on PATH

HOSTILE = "@acme/team ![x](http://attacker.example/x.png) <img src=x>"


def _task(repo: Path, title: str, capsys: pytest.CaptureFixture[str]) -> str:
    create(root=repo, title=title, description="d", criteria=["says two", HOSTILE])
    task_id = capsys.readouterr().out.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"task {task_id}")
    return task_id


def test_one_pull_request_per_task_instead_of_a_merge(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github_remote(repo, tmp_path / "remote.git")
    first, second = _task(repo, "pages", capsys), _task(repo, f"docs {HOSTILE}", capsys)
    git(repo, "push", "-q", "origin", "main")
    before = git(repo, "rev-parse", "main")
    with FakeGitHub({REPO: tmp_path / "remote.git"}, {TOKEN: True}) as github:
        for task_id, name in ((first, "a.txt"), (second, "b.txt")):
            script = [answer(ANALYSIS), commit({name: "two\n"}), answer(APPROVED)]
            ctx, _ = context(repo, script, land="pr")
            ctx.pr = PrTarget(REPO, github.url, "origin", "unused", "main", True, TOKEN)
            item = process_task(ctx, task_id, max_cost=None)
            assert item is not None and item.shown_status == "in_pr", item
        pulls = github.pulls(REPO)
    assert git(repo, "rev-parse", "main") == before  # nothing merged here
    assert [p["head"]["ref"] for p in pulls] == [f"fks/forge/{first}", f"fks/forge/{second}"]
    assert all(p["draft"] and p["base"]["ref"] == "main" for p in pulls)
    assert pulls[0]["title"] == f"{first}: pages"
    assert "@acme" not in pulls[1]["title"]
    body = pulls[1]["body"]
    assert "### Acceptance criteria" in body and "`says two`" in body
    assert "**Verdict:** approved" in body
    rendered = re.sub(r"(`+)(?:(?!\1).)*?\1", "", body, flags=re.DOTALL)
    assert "@" not in rendered and "](" not in rendered and "<img" not in rendered
    item = WorkStore(repo).get(first)
    assert item is not None and item.pr is not None and item.pr.url == pulls[0]["html_url"]
    assert TaskBoard(repo).task(first).meta.status == "In Progress"
    assert pulls[0]["html_url"] in capsys.readouterr().out
    status = fks("forge", "status", cwd=repo)
    assert f"{first}" in status.stdout and "in_pr" in status.stdout, status.output
    assert f"review of pull request {pulls[0]['html_url']}" in status.stdout
    with ui_server(cwd=repo) as ui, ui.client() as client:
        board = client.get("/forge/0").text
    assert f'<a href="{pulls[1]["html_url"]}" rel="noopener noreferrer">#2</a>' in board


@pytest.mark.parametrize(
    ("token", "fragment"),
    [("", "no GitHub token"), ("ghp_readonly_0123456789", "may not push to acme/widgets")],
)
def test_forge_checks_the_pull_request_settings_before_any_worker(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], token: str, fragment: str
) -> None:
    write_config(repo, {"forge": {"land": "pr"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "land in pull requests")
    github_remote(repo, tmp_path / "remote.git")
    _task(repo, "pages", capsys)
    with FakeGitHub({REPO: tmp_path / "remote.git"}, {token: False} if token else {}) as github:
        env = {**token_env(github.url, token), "PATH": "/usr/local/bin:/usr/bin:/bin"}
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # fks, and no gh
        done = fks("forge", "run", cwd=repo, env=env)
    one_line_error(done, fragment)
    assert not (repo / ".forge" / "runs").exists()
