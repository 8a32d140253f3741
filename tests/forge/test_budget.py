"""`fks forge run`'s budgets with the real claude CLI on the host against the fake Messages API:
--max-cost across the tasks and --max-task-cost per task are hard (a stage stops at the turn
that crosses them) and their messages name what was spent of which limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import Result, fks, git, init_repo, write_config

pytestmark = pytest.mark.claude


def analyst(request: Request) -> Any:
    """Every stage asks for a structured answer first: one tool call (one turn) each."""
    if request.tool_results:
        return [{"text": "Done."}]
    plan = {"complexity": "low", "plan": "Write it.", "sufficient": True}
    return [{"tool": "StructuredOutput", "input": plan}]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    done = fks("forge", "create", "say hi", "--description", "Make say hi", cwd=path)
    assert done.code == 0, done.output
    git(path, "add", "-A")
    git(path, "commit", "-qm", "task")
    return path


def forge_run(repo: Path, *args: str) -> tuple[Result, int, dict[str, Any]]:
    with FakeAnthropic(responder=analyst) as fake:
        env = isolated_environ(fake.env(repo.parent / "claude"))
        done = fks("forge", "run", *args, cwd=repo, env=env, timeout=300)
        asked = len(fake.main_requests())
    (item_file,) = (repo / ".forge" / "work").glob("*.yaml")
    return done, asked, yaml.safe_load(item_file.read_text())


def last_stage(repo: Path) -> dict[str, Any]:
    """The last stage the task ran, from its run record."""
    (run_dir,) = (repo / ".forge" / "runs").iterdir()
    stage = yaml.safe_load((run_dir / "run.json").read_text())["steps"][-1]
    assert isinstance(stage, dict)
    return stage


@pytest.mark.parametrize("given_by", ["option", "config"])
def test_a_task_budget_fails_the_task_at_the_turn_that_crosses_it(
    repo: Path, given_by: str
) -> None:
    if given_by == "config":
        write_config(repo, {"forge": {"maxTaskCost": 0.001}})
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "budget")
    done, asked, item = forge_run(repo, *(["--max-task-cost", "0.001"] * (given_by == "option")))
    assert done.code == 1, done.output
    assert item["status"] == "failed", item
    spent = item["cost_usd"]
    assert 0.001 <= spent < 0.001 + spent / asked, (spent, asked)  # at most one turn over
    stage = last_stage(repo)
    assert (stage["reason"], stage["iterations"][-1]["reason"]) == ("max_cost", "budget"), stage
    expected = f"Stopped: spent ${spent:.4f} of --max-task-cost $0.001"
    assert item["error"].startswith(expected) and "forge.maxTaskCost" in item["error"], item
    assert expected in done.stdout, done.output


def test_the_session_budget_stops_a_stage_at_the_turn_that_crosses_it(repo: Path) -> None:
    done, asked, item = forge_run(repo, "--max-cost", "0.001")
    assert done.code == 1, done.output
    assert item["status"] == "pending", item
    spent = item["cost_usd"]
    assert 0.001 <= spent < 0.001 + spent / asked, (spent, asked)  # at most one turn over
    stage = last_stage(repo)
    assert (stage["reason"], stage["iterations"][-1]["reason"]) == ("max_cost", "budget"), stage
    assert f"Stopped: spent ${spent:.4f} of --max-cost $0.001" in done.stdout, done.output
