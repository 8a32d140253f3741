"""A run record names where its run happened; a cloned repository can ship a `.forge/` whose
records name anything. fks acts only in the project whose `.forge/` holds a record: `fks review`,
the run page, `fks run --resume`, `fks clean` and `fks logs` never run git, plan, delete or read
somewhere else a record names."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from fks_testing.attacks import planted_record, textconv_repository
from fks_testing.helpers import commit_scripts, fks, git, init_repo
from starlette.testclient import TestClient

from sandbox_runner.web.app import create_app
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

RUN = "20260102-030405-abcd"
NOT_READ = "not read: its record names the repository"
PLACES = {
    "a bare repository the clone holds": True,
    "another repository": False,
}


def cloned_with_record(tmp_path: Path, bare: bool) -> tuple[Path, Path, Path]:
    """A cloned project whose `.forge/` holds a record of a run in a repository whose config
    runs a program for every diff (inside the clone when `bare`, beside it otherwise):
    (project, that repository, the program's marker)."""
    marker = tmp_path / "textconv-ran"
    project = init_repo(tmp_path / "clone", {"README.md": "hello\n"})
    target = project / "evil.git" if bare else tmp_path / "other"
    start, _ = textconv_repository(target, marker, bare=bare)
    planted_record(project, RUN, target, start)
    return project, target, marker


@pytest.mark.parametrize("bare", PLACES.values(), ids=PLACES.keys())
def test_review_runs_no_git_where_a_record_points(tmp_path: Path, bare: bool) -> None:
    project, target, marker = cloned_with_record(tmp_path, bare)
    done = fks("review", RUN, "--diff", cwd=project)
    assert not marker.exists()
    assert done.code == 0, done.output
    (line,) = [line for line in done.stdout.splitlines() if NOT_READ in line]
    assert str(target) in line and str(project) in line
    assert "Traceback" not in done.output


@pytest.mark.parametrize("bare", PLACES.values(), ids=PLACES.keys())
def test_the_run_page_runs_no_git_where_a_record_points(tmp_path: Path, bare: bool) -> None:
    project, target, marker = cloned_with_record(tmp_path, bare)
    guard = Guard(token=secrets.token_urlsafe(16), port=48766, name="fks-test.localhost")
    client = TestClient(
        create_app(Sources((project,)), guard), base_url="http://fks-test.localhost:48766"
    )
    assert client.get(f"/static/fks.css?token={guard.token}").status_code == 200
    page = client.get(f"/runs/0/{RUN}")
    assert page.status_code == 200
    assert not marker.exists()
    assert page.text.count(NOT_READ) == 1
    assert str(target) in page.text


def test_resume_never_plans_where_a_record_points(tmp_path: Path) -> None:
    """An unfinished run whose record names another folder, holding an agent of that name: it
    is not resumed there (its agent, config and git are not used), in one line."""
    marker = tmp_path / "agent-ran"
    project = init_repo(tmp_path / "clone", {"README.md": "hello\n"})
    elsewhere = init_repo(tmp_path / "elsewhere", {"README.md": "there\n"})
    commit_scripts(elsewhere, {"step1.sh": f"#!/bin/sh\ntouch {marker}\n"})
    (elsewhere / ".forge" / "runs" / RUN).mkdir(parents=True)  # where it would record the run
    planted_record(project, RUN, elsewhere, git(project, "rev-parse", "HEAD"))
    path = project / ".forge" / "runs" / RUN / "run.json"
    data = json.loads(path.read_text())
    data["status"] = "interrupted"
    step = {"status": "interrupted", "repo": None, "branch": None, "merged": False}
    data["steps"][0] |= step | {"iterations": []}
    data["options"]["sandbox"] = False
    path.write_text(json.dumps(data))
    done = fks("run", "--resume", RUN, cwd=project)
    assert not marker.exists()
    assert done.code == 2, done.output
    (line,) = done.stderr.strip().splitlines()
    assert f"names {elsewhere} as the folder it ran in, which is not in this project" in line


def test_clean_touches_nothing_in_a_repository_a_record_names(tmp_path: Path) -> None:
    """`fks clean --branches` deletes no branch and no folder of another repository because a
    record says its run's step was there."""
    project = init_repo(tmp_path / "clone", {"README.md": "hello\n"})
    other = init_repo(tmp_path / "other", {"README.md": "there\n"})
    kept = other / ".forge" / "worktrees" / "old-run"
    kept.mkdir(parents=True)
    start = git(other, "rev-parse", "HEAD")
    git(other, "branch", "fks/planted")  # merged into main: what clean --branches deletes
    planted_record(project, RUN, other, start)
    done = fks("clean", "--branches", cwd=project)
    assert done.code == 0, done.output
    assert kept.is_dir()
    assert git(other, "branch", "--list", "fks/planted")


def test_logs_read_no_file_outside_the_runs_folder(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "clone", {"README.md": "hello\n"})
    outside = tmp_path / "private.txt"
    outside.write_text("PRIVATE-host-file\n")
    planted_record(project, RUN, project, git(project, "rev-parse", "HEAD"))
    path = project / ".forge" / "runs" / RUN / "run.json"
    data = json.loads(path.read_text())
    data["steps"][0]["iterations"][0]["log"] = str(outside)
    path.write_text(json.dumps(data))
    for args in ((), ("--raw",)):
        done = fks("logs", RUN, *args, cwd=project)
        assert done.code == 0, done.output
        assert "PRIVATE" not in done.output
