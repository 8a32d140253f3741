"""`fks clean --branches` on the branches of real sandboxed runs: those whose work landed and
those that hold no commit go, one with work that did not land stays; `fks review` still shows a
deleted branch's recorded commits, and a run whose empty branch went can be resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import commit_scripts, fks, git, init_repo
from fks_testing.teams import approving_team

DONE_AGENT = """#!/bin/sh
echo "done work" > done.txt
git add done.txt && git commit -qm "done: work"
echo FORKHESTRA_COMPLETE
"""
IDLE_AGENT = """#!/bin/sh
echo "thinking"
"""
PARTIAL_AGENT = """#!/bin/sh
echo "partial" > partial.txt
git add partial.txt && git commit -qm "partial: work"
"""


def _run(repo: Path, *args: str, code: int) -> dict:  # type: ignore[type-arg]
    before = set((repo / ".forge" / "runs").glob("*")) if (repo / ".forge").exists() else set()
    done = fks("run", "--sandbox", *args, cwd=repo, timeout=600)
    assert done.code == code, done.output
    [new] = set((repo / ".forge" / "runs").glob("*")) - before
    return json.loads((new / "run.json").read_text())


def _branches(repo: Path) -> set[str]:
    return set(git(repo, "branch", "--format=%(refname:short)").split())


@pytest.mark.docker
def test_clean_branches_keeps_only_unlanded_work(tmp_path: Path) -> None:
    repo = commit_scripts(
        init_repo(tmp_path / "proj"),
        {"done.sh": DONE_AGENT, "idle.sh": IDLE_AGENT, "partial.sh": PARTIAL_AGENT},
    )
    landed = _run(repo, "./scripts/done.sh", code=0)
    empty = _run(repo, "./scripts/idle.sh:3", "--no-progress-limit", "1", code=1)
    unlanded = _run(repo, "./scripts/partial.sh:1", code=1)
    branch = {
        name: r["steps"][0]["branch"]
        for name, r in (("landed", landed), ("empty", empty), ("unlanded", unlanded))
    }
    assert set(branch.values()) <= _branches(repo)

    done = fks("clean", "--branches", cwd=repo, timeout=300)
    assert done.code == 0, done.output
    assert f"deleted branch {branch['landed']} (its work is on main)" in done.stdout
    assert f"deleted branch {branch['empty']} (it holds no commit of its own)" in done.stdout
    assert branch["unlanded"] not in done.stdout
    assert _branches(repo) == {"main", branch["unlanded"]}

    review = fks("review", landed["id"], cwd=repo)
    assert review.code == 0, review.output
    assert "the branch no longer exists" in review.stdout
    assert "done: work" in review.stdout  # from the commit range the record keeps
    assert "done.txt" in review.stdout

    resumed = fks("run", "--resume", empty["id"], "--more", "1", cwd=repo, timeout=600)
    assert resumed.code == 1, resumed.output  # runs again (and again makes no progress)
    record = json.loads((repo / ".forge" / "runs" / empty["id"] / "run.json").read_text())
    assert len(record["steps"][0]["iterations"]) > len(empty["steps"][0]["iterations"])


@pytest.mark.claude
def test_clean_branches_removes_landed_forge_task_branches(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    done = fks("forge", "create", "Add the login page", cwd=repo)
    assert done.code == 0, done.output
    task = done.stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    with FakeAnthropic(responder=approving_team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks("forge", "run", cwd=repo, env=env, timeout=600)
    assert done.code == 0, done.output
    [task_branch] = [b for b in _branches(repo) if task in b]
    done = fks("clean", "--branches", cwd=repo, timeout=300)
    assert done.code == 0, done.output
    assert f"deleted branch {task_branch} (its work is on main)" in done.stdout
    assert _branches(repo) == {"main"}
