"""`fks runs` filters (--since, --status, --limit), --json and the totals, on records made by
real `fks run` invocations."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import fks, git, init_repo
from fks_testing.records import START, make_run, save_run
from fks_testing.runs import (
    complete_run,
    incomplete_run,
    recorded_project,  # noqa: F401  (the fixture `project`)
)
from fks_testing.teams import approving_team

from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.outcomes import Status
from sandbox_runner.records.record import RunOptions


def _ids(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines()[1:] if line and line[0].isdigit()]


def test_filters_and_totals(project: Path) -> None:
    first = complete_run(project)
    second = incomplete_run(project)
    third = complete_run(project)
    done = fks("runs", "--status", "incomplete", cwd=project)
    assert done.code == 0, done.output
    assert _ids(done.stdout) == [second]
    assert done.stdout.splitlines()[-1] == "Total: 1 run, 0 landed, 0 failed, $0.0000"
    done = fks("runs", "--status", "complete", "--limit", "1", cwd=project)
    assert _ids(done.stdout) == [third], done.output
    done = fks("runs", "--status", "complete,incomplete", "--since", "1h", cwd=project)
    assert _ids(done.stdout) == [first, second, third], done.output
    assert done.stdout.splitlines()[-1] == "Total: 3 runs, 2 landed, 0 failed, $0.0000"
    done = fks("runs", "--since", "2999-01-01", cwd=project)
    assert done.code == 0 and "No run recorded in" in done.stdout and "matches" in done.stdout
    assert done.stdout.rstrip().endswith("matches --since."), done.output
    done = fks("runs", "--status", "failed", cwd=project)
    assert done.stdout.rstrip().endswith("matches --status failed."), done.output


def test_json_lists_runs_and_totals_in_snake_case(project: Path) -> None:
    first = complete_run(project)
    second = incomplete_run(project)
    done = fks("runs", "--json", cwd=project)
    assert done.code == 0, done.output
    data = json.loads(done.stdout)
    assert [r["id"] for r in data["runs"]] == [first, second]
    assert [r["status"] for r in data["runs"]] == ["complete", "incomplete"]
    assert data["runs"][1]["steps"] == 3 and data["runs"][1]["steps_done"] == 1
    assert [r["landed"] for r in data["runs"]] == [True, False]
    assert data["totals"] == {"runs": 2, "landed": 1, "failed": 0, "cost_usd": 0.0}
    assert data["forge_sessions"] == []


def test_a_forge_session_counts_the_tasks_that_landed_not_its_stages_merges(
    project: Path,
) -> None:
    """A sandboxed forge session that ended with a task waiting for an answer: each task's
    stages were merged into the task's own branch, but only the two completed tasks landed on
    the base (the numbers `fks forge run` printed), and a complete local run counts too."""
    local = complete_run(project)
    items = {"t1": "completed", "t2": "completed", "t3": "waiting"}
    for n, (task, status) in enumerate(items.items()):
        record = make_run(f"forge-{n}", started=START + timedelta(minutes=n), merged=True)
        record.options = RunOptions(forge_task=task, forge_session="S1")
        record.status = Status.COMPLETE if status == "completed" else Status.INCOMPLETE
        save_run(project, record)
        item = WorkItem(task_id=task, title=f"task {n}", status=status, runs=[record.id])
        item.merge_commit = "a" * 40 if status == "completed" else None
        WorkStore(project).write(item)
    done = fks("runs", cwd=project)
    assert done.code == 0, done.output
    head = next(line for line in done.stdout.splitlines() if line.startswith("S1"))
    assert "forge session: 3 tasks" in head and "2/3 landed" in head, done.stdout
    assert done.stdout.splitlines()[-1] == "Total: 4 runs, 3 landed, 0 failed, $0.0600"
    data = json.loads(fks("runs", "--json", cwd=project).stdout)
    assert {r["id"]: r["landed"] for r in data["runs"]} == {
        "forge-0": True,
        "forge-1": True,
        "forge-2": False,
        local: True,
    }
    assert data["forge_sessions"][0]["landed"] == 2 and data["totals"]["landed"] == 3


def test_bad_filters_are_one_line_usage_errors(project: Path) -> None:
    done = fks("runs", "--status", "complet", cwd=project)
    assert done.code == 2
    assert done.stderr.startswith("fks: --status 'complet': not a run status")
    assert "(did you mean 'complete'?)" in done.stderr
    done = fks("runs", "--since", "yesterday", cwd=project)
    assert done.code == 2 and "--since 'yesterday': give an age" in done.stderr
    assert "Traceback" not in done.output


# --- a `fks forge run` session, with the real claude CLI against the fake Messages API ----------


@pytest.mark.claude
def test_a_forge_session_is_grouped_with_its_task_titles(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    tasks = []
    for title in ("Add the login page", "Fix the \u202eflag\u202c parser"):
        done = fks("forge", "create", title, cwd=repo)
        assert done.code == 0, done.output
        tasks.append(done.stdout.split()[-1])
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    with FakeAnthropic(responder=approving_team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks("forge", "run", cwd=repo, env=env, timeout=600)
    assert done.code == 0, done.output
    listing = fks("runs", cwd=repo)
    assert listing.code == 0, listing.output
    lines = listing.stdout.splitlines()
    head = next(line for line in lines if "forge session: 2 tasks" in line)
    assert "2/2 landed" in head
    rows = lines[lines.index(head) + 1 : lines.index(head) + 3]
    assert all(row.startswith("  ") for row in rows), listing.stdout
    assert f"{tasks[0]} Add the login page" in listing.stdout
    assert f"{tasks[1]} Fix the <U+202E>flag" in listing.stdout  # bidi controls shown, not obeyed
    assert "\u202e" not in listing.stdout
    assert lines[-1].startswith("Total: 2 runs, 2 landed, 0 failed, $")
    data = json.loads(fks("runs", "--json", cwd=repo).stdout)
    [session] = data["forge_sessions"]
    assert sorted(session["tasks"]) == sorted(tasks) and session["landed"] == 2
    assert {r["title"] for r in data["runs"]} == {
        "Add the login page",
        "Fix the <U+202E>flag<U+202C> parser",
    }
