"""The forge task state machine on the fake sandbox: real git (task branch, worktree, landing),
scripted agent runs (stream-json results with structured output, commits made in the worktree)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from fks_testing.fakes import FakeRun, FakeScriptExhausted
from fks_testing.forge import (
    ANALYSIS,
    APPROVED,
    REJECTED,
    answer,
    commit,
    context,
    new_task,
)
from fks_testing.helpers import git

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.errors import SandboxError
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.forge.worker import claim, process_task
from sandbox_runner.records.store import RunStore

# The stages resolve the claude CLI on PATH, even on the fake sandbox.
pytestmark = pytest.mark.claude


def status_of(repo: Path, task_id: str) -> str:
    return TaskBoard(repo).task(task_id).meta.status


def test_approved_first_time_lands_on_the_base(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "write one", capsys)
    ctx, sandbox = context(repo, [answer(ANALYSIS), commit({"a.txt": "one\n"}), answer(APPROVED)])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "completed", item
    assert (repo / "a.txt").read_text() == "one\n"  # landed in the user's checkout
    assert git(repo, "log", "-1", "--format=%s", "main") == "implement a.txt"
    assert status_of(repo, task_id) == "Done"
    assert item.attempts == 1 and item.retries == 0
    assert item.cost_usd == pytest.approx(0.04)
    # Each stage's prompt names the task; the schema went to --json-schema.
    assert all(task_id in " ".join(spec.argv) for spec in sandbox.started)
    assert "--json-schema" in sandbox.started[0].argv
    assert "--json-schema" not in sandbox.started[1].argv
    assert sandbox.started[1].argv[sandbox.started[1].argv.index("--tools") + 1] == (
        "Bash,Read,Write,Edit,Glob,Grep"
    )
    # The run record keeps every stage, with the review's structured answer.
    record = RunStore(repo).load(item.runs[0])
    assert [s.agent for s in record.steps] == ["forge:analyze", "forge:implement", "forge:review"]
    review = record.steps[2].iterations[0].claude
    assert review is not None and review.structured_output == APPROVED
    saved = WorkStore(repo).get(task_id)
    assert saved is not None and saved.status == "completed" and saved.pid is None
    assert not (repo / ".forge" / "task-worktrees" / task_id).exists()


def test_rejected_then_approved_after_rework_with_the_feedback(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "write two", capsys)
    seen: list[str] = []

    def rework(spec: ExecSpec) -> FakeRun:
        seen.append((spec.cwd / ".forge" / "task.yaml").read_text())
        seen.append((spec.cwd / ".forge" / "review.yaml").read_text())
        return commit({"a.txt": "two\n"})(spec)

    script = [
        answer(ANALYSIS),
        commit({"a.txt": "one\n"}),
        answer(REJECTED),
        rework,
        answer(APPROVED),
    ]
    ctx, _ = context(repo, script)
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "completed"
    assert item.attempts == 2 and item.retries == 1
    assert "- a.txt must say 'two'" in yaml.safe_load(seen[0])["feedback"]
    assert yaml.safe_load(seen[1]) == REJECTED
    assert (repo / "a.txt").read_text() == "two\n"


def test_rejected_more_than_max_review_retries_is_an_error_with_the_branch_kept(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "never good", capsys)
    script = [
        answer(ANALYSIS),
        commit({"a.txt": "one\n"}),
        answer(REJECTED),
        commit({"a.txt": "uno\n"}),
        answer(REJECTED),
    ]
    ctx, _ = context(repo, script, maxReviewRetries=1)
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert "rejected after 2 attempts" in (item.error or "")
    assert (repo / "a.txt").read_text() == "zero\n"  # the base is untouched
    assert git(repo, "show", f"fks/forge/{task_id}:a.txt") == "uno"
    task = TaskBoard(repo).task(task_id)
    assert task.meta.status == "Blocked" and "rejected after 2" in task.notes


def test_an_invalid_structured_answer_is_asked_again_once_then_fails_the_task(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "bad answers", capsys)
    bad = {"complexity": "enormous", "plan": "x"}
    ctx, sandbox = context(repo, [answer(bad), answer({"plan": "no complexity"})])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert "invalid AnalysisResult: complexity" in (item.error or "")
    assert len(sandbox.started) == 2
    assert status_of(repo, task_id) == "Blocked"


def test_a_valid_second_answer_goes_on(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task_id = new_task(repo, "second try", capsys)
    script = [
        FakeRun(stdout="not json at all\n"),
        answer(ANALYSIS),
        commit({"b.txt": "b\n"}),
        answer(APPROVED),
    ]
    ctx, _ = context(repo, script)
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "completed"


def test_insufficient_analysis_goes_to_the_architect_who_asks_a_human(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "unclear", capsys)
    question = {"resolved": False, "question": "Red or blue?"}
    ctx, _ = context(repo, [answer({**ANALYSIS, "sufficient": False}), answer(question)])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "waiting"
    assert "Red or blue?" in (repo / ".forge" / "clarifications" / f"{task_id}.md").read_text()
    assert status_of(repo, task_id) == "Blocked"
    # Not claimable until answered.
    ctx, _ = context(repo, [])
    assert process_task(ctx, task_id, max_cost=None) is None
    WorkStore(repo).record_answer(task_id, "Blue.")
    seen: list[str] = []

    def architect(spec: ExecSpec) -> FakeRun:
        seen.append(" ".join(spec.argv))
        return answer({"resolved": True, "analysis": ANALYSIS})

    ctx, _ = context(repo, [architect, commit({"a.txt": "blue\n"}), answer(APPROVED)])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "completed"
    assert "Blue." in seen[0] and "Red or blue?" in seen[0]
    assert status_of(repo, task_id) == "Done"


def test_implement_without_a_commit_fails_the_task(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "lazy", capsys)
    ctx, _ = context(repo, [answer(ANALYSIS), answer(None)])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert item.error == "Implement made no commit"


def test_a_conflict_on_landing_sends_the_task_back_on_the_new_base(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "conflicting", capsys)
    feedback: list[str] = []

    def land_conflicting_change_first(spec: ExecSpec) -> FakeRun:
        # Someone else's work lands on main while this task is reviewed.
        (repo / "a.txt").write_text("theirs\n")
        git(repo, "commit", "-qam", "their change")
        return answer(APPROVED)

    def rework(spec: ExecSpec) -> FakeRun:
        feedback.append((spec.cwd / ".forge" / "task.yaml").read_text())
        assert (spec.cwd / "a.txt").read_text() == "theirs\n"  # starts from the new base
        return commit({"a.txt": "theirs\nmine\n"})(spec)

    script = [
        answer(ANALYSIS),
        commit({"a.txt": "mine\n"}),
        land_conflicting_change_first,
        rework,
        answer(APPROVED),
    ]
    ctx, _ = context(repo, script)
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "completed", item.error
    assert item.retries == 1 and item.attempts == 2
    assert (
        "conflicts with your previous implementation in: a.txt"
        in yaml.safe_load(feedback[0])["feedback"]
    )
    assert (repo / "a.txt").read_text() == "theirs\nmine\n"
    assert "their change" in git(repo, "log", "--format=%s", "main")


def test_the_work_item_is_the_lock(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task_id = new_task(repo, "locked", capsys)
    store = WorkStore(repo)
    ctx, _ = context(repo, [])
    held = claim(ctx, task_id, "locked", "named")
    assert isinstance(held, WorkItem) and held.status == "executing" and held.pid == os.getpid()
    assert "being processed by another fks forge run" in str(claim(ctx, task_id, "x", "named"))
    held.pid = 2**22 + 12345  # no such process: the holder died
    store.write(held)
    ctx.session = "again"
    again = claim(ctx, task_id, "locked", "named")
    assert isinstance(again, WorkItem) and again.seq == 1 and again.session == "again"


def test_an_interrupted_task_continues_where_it_stopped(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "resumable", capsys)

    def interrupt(spec: ExecSpec) -> FakeRun:
        raise KeyboardInterrupt

    ctx, _ = context(repo, [answer(ANALYSIS), interrupt])
    with pytest.raises(KeyboardInterrupt):
        process_task(ctx, task_id, max_cost=None)
    item = WorkStore(repo).get(task_id)
    assert item is not None and item.status == "interrupted" and item.stage == "implement"
    ctx, sandbox = context(repo, [commit({"c.txt": "c\n"}), answer(APPROVED)])
    done = process_task(ctx, task_id, max_cost=None)
    assert done is not None and done.status == "completed"
    assert "--json-schema" not in sandbox.started[0].argv  # no second analysis


def test_the_budget_stops_a_task_between_stages(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "expensive", capsys)
    ctx, sandbox = context(repo, [answer(ANALYSIS, cost=5.0)])
    item = process_task(ctx, task_id, max_cost=1.0)
    assert item is not None and item.status == "pending" and item.stage == "implement"
    assert len(sandbox.started) == 1


def test_a_script_that_runs_out_is_a_named_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "exhausted", capsys)
    ctx, _ = context(repo, [])
    with pytest.raises(FakeScriptExhausted):
        process_task(ctx, task_id, max_cost=None)


def test_a_conflict_beyond_the_retries_fails_the_task_and_keeps_the_branch(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "conflict twice", capsys)

    def someone_lands_first(spec: ExecSpec) -> FakeRun:
        (repo / "a.txt").write_text("theirs\n")
        git(repo, "commit", "-qam", "their change")
        return answer(APPROVED)

    script = [answer(ANALYSIS), commit({"a.txt": "mine\n"}), someone_lands_first]
    ctx, _ = context(repo, script, maxReviewRetries=0)
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert item.error == "conflicts with the base in a.txt; branch kept"
    assert git(repo, "show", f"fks/forge/{task_id}:a.txt") == "mine"
    assert (repo / "a.txt").read_text() == "theirs\n"


def test_an_implement_run_that_fails_without_a_commit_fails_the_task(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "crashing", capsys)
    crash = FakeRun(stdout="", stderr="claude: boom\n", exit_code=1)
    ctx, _ = context(repo, [answer(ANALYSIS), crash])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert item.error == "Implement failed: Iteration 1: claude exited 1 without a result"


def test_an_invalid_architect_answer_fails_the_task(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "no question", capsys)
    unresolved = {"resolved": False}
    ctx, _ = context(
        repo, [answer({**ANALYSIS, "sufficient": False}), answer(unresolved), answer(unresolved)]
    )
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert item.error == "Architect: invalid ArchitectResult: an unresolved answer needs a question"


def test_a_docker_error_fails_the_task_in_one_line_never_leaving_it_executing(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import docker.errors

    task_id = new_task(repo, "crashing", capsys)

    def crash(spec: ExecSpec) -> FakeRun:
        raise docker.errors.APIError("500 Server Error: the container is gone\nmore detail")

    ctx, _ = context(repo, [answer(ANALYSIS), crash])
    with pytest.raises(SandboxError) as raised:
        process_task(ctx, task_id, max_cost=None)
    message = str(raised.value)
    assert "\n" not in message and f"fks forge retry {task_id}" in message
    assert "Docker error during Implement: 500 Server Error: the container is gone" in message
    item = WorkStore(repo).get(task_id)
    assert item is not None and item.status == "failed" and item.pid is None
    assert item.error is not None and item.error.startswith("Docker error during Implement")
    assert status_of(repo, task_id) == "Blocked"
    (run_id,) = item.runs
    assert RunStore(repo).load(run_id).status == "failed"
