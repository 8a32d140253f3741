"""`fks forge …` as a user runs them (the console script, exit codes, files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import fks, git, init_repo, write_config


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


def create(repo: Path, title: str) -> str:
    done = fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
    assert done.code == 0, done.output
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"task {title}")
    return done.stdout.split()[-1]


def test_forge_create_runs_from_one_options_object(
    repo: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from sandbox_runner.commands.forge_backlog import CreateOptions, create

    options = CreateOptions(title="Add X", cwd=repo, criteria=("it works",), labels=("a", "b"))
    assert create(options) == 0
    task = capfd.readouterr().out.split()[-1]
    shown = fks("tasks", "view", task, cwd=repo)
    assert shown.code == 0, shown.output
    assert f"{task} - Add X" in shown.stdout
    assert "Labels: a, b" in shown.stdout and "- [ ] #1 it works" in shown.stdout


def test_init_writes_the_forge_prompts_and_the_schema(repo: Path) -> None:
    done = fks("init", "--cwd", str(repo))
    assert done.code == 0, done.output
    for stage in ("analyze", "architect", "implement", "review"):
        assert (repo / "system-prompts" / "forge" / f"{stage}.md").read_text().startswith("# ")
    schema = json.loads((repo / "forge" / "chains.schema.json").read_text())
    assert "forge" in schema["properties"]
    assert fks("validate", "--cwd", str(repo)).code == 0


def test_a_bad_forge_section_is_a_config_error(repo: Path) -> None:
    write_config(repo, {"forge": {"maxReviewRetries": -1}})
    done = fks("validate", "--cwd", str(repo))
    assert done.code == 2
    assert "forge.maxReviewRetries: must not be negative" in done.stderr
    write_config(repo, {"forge": {"prompts": {"review": "missing.md"}}})
    done = fks("forge", "run", "--cwd", str(repo))
    assert done.code == 2
    assert "forge.prompts.review references 'missing.md' which does not exist" in done.stderr


def test_nothing_to_do_without_ready_tasks(repo: Path) -> None:
    done = fks("forge", "run", "--cwd", str(repo))
    assert done.code == 0, done.output
    assert "No ready tasks" in done.stdout
    status = fks("forge", "status", "--cwd", str(repo))
    assert status.code == 0 and "No task has been through fks forge yet" in status.stdout
    as_json = fks("forge", "run", "--json", "--cwd", str(repo))
    assert as_json.code == 0 and json.loads(as_json.stdout)["tasks"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parallel", "0"], "--parallel must be between 1 and 64"),
        (["--max-cost", "-1"], "--max-cost must be a positive amount of USD, got -1\n"),
        (["--max-task-cost", "0"], "--max-task-cost must be a positive amount of USD, got 0\n"),
        (["TASK-zzzzzz"], "no task TASK-zzzzzz"),
        (["--base", "nope"], "--base nope: no such branch"),
        (["--image", "x"], "--image, --engine and --allow only apply to --sandbox runs"),
        (["--engine", "tcp://127.0.0.1:9"], "only apply to --sandbox runs"),
        (["--sandbox", "--engine", "tcp://box"], "--engine: 'tcp://box'"),
        (["--force"], "--force redoes named tasks only"),
    ],
)
def test_usage_errors_are_one_line_and_start_nothing(
    repo: Path, args: list[str], message: str
) -> None:
    create(repo, "something")
    done = fks("forge", "run", *args, "--cwd", str(repo))
    assert done.code == 2, done.output
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.output
    assert not (repo / ".forge" / "work").exists()


def test_uncommitted_changes_outside_the_task_files_are_refused(repo: Path) -> None:
    create(repo, "something")
    (repo / "README.md").write_text("changed\n")
    done = fks("forge", "run", "--cwd", str(repo))
    assert done.code == 2
    assert "uncommitted changes to tracked files" in done.stderr and "README.md" in done.stderr
    assert not (repo / ".forge" / "work").exists()


def test_answer_needs_an_open_question_and_one_answer(repo: Path, tmp_path: Path) -> None:
    task = create(repo, "something")
    done = fks("forge", "answer", task, "yes", "--cwd", str(repo))
    assert done.code == 2 and "has no open question" in done.stderr
    (tmp_path / "a.txt").write_text("yes")
    done = fks(
        "forge", "answer", task, "yes", "--file", str(tmp_path / "a.txt"), "--cwd", str(repo)
    )
    assert done.code == 2 and "one of them" in done.stderr
    assert fks("forge", "clarifications", "--cwd", str(repo)).stdout.strip() == "No open questions."


def test_an_answer_longer_than_the_limit_is_refused_unread(repo: Path, tmp_path: Path) -> None:
    import yaml

    from sandbox_runner.commands.forge_task import ANSWER_LIMIT

    task = create(repo, "asked")
    work = repo / ".forge" / "work"
    work.mkdir(parents=True)
    item = {"task_id": task, "status": "waiting", "stage": "architect", "question": "Which?"}
    (work / f"{task}-001.yaml").write_text(yaml.safe_dump(item))
    done = fks("forge", "answer", task, "x" * (ANSWER_LIMIT + 1), "--cwd", str(repo))
    assert done.code == 2 and "shorten it" in done.stderr, done.output
    (tmp_path / "big.txt").write_bytes(b"\xff" * (4 * ANSWER_LIMIT + 1))  # not even UTF-8
    done = fks("forge", "answer", task, "--file", str(tmp_path / "big.txt"), "--cwd", str(repo))
    assert done.code == 2 and "longer than the" in done.stderr, done.output
    assert "answer" not in yaml.safe_load((work / f"{task}-001.yaml").read_text())
    done = fks("forge", "answer", task, "y" * ANSWER_LIMIT, "--cwd", str(repo))
    assert done.code == 0, done.output


# --- with the real claude CLI, locally (each task in a git worktree) -----------------------------


READ_DIFF = [{"tool": "Read", "input": {"file_path": ".forge/review.diff"}}]


def local_team(request: Request) -> Any:
    system = request.system_text
    results = json.dumps(request.tool_results)
    reviewing = "You review the implementation of one task" in system
    if reviewing and "Structured output" not in results and "+hi" in results:
        # the diff, read from .forge/review.diff
        return [{"tool": "StructuredOutput", "input": {"approved": True}}]
    if any(r for r in request.tool_results):
        return [{"text": "Done."}]
    if "You analyze one task" in system:
        plan = {"complexity": "low", "plan": "Write it.", "sufficient": True}
        return [{"tool": "StructuredOutput", "input": plan}]
    if "You implement one task" in system:
        command = "test -f .forge/task.yaml && echo hi > hi.txt && git add hi.txt && git commit -qm 'say hi'"
        return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
    if reviewing and ".forge/review.diff" in request.prompt and "+hi" not in request.prompt:
        return READ_DIFF
    return [{"text": f"unexpected: {request.prompt[:100]}"}]


@pytest.mark.claude
def test_forge_run_without_sandbox_uses_a_worktree_per_task(repo: Path, tmp_path: Path) -> None:
    task = create(repo, "say hi")
    with FakeAnthropic(responder=local_team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks(
            "forge", "run", "--junit", str(tmp_path / "j.xml"), cwd=repo, env=env, timeout=300
        )
    assert done.code == 0, done.output
    assert f"[{task}] [fks] Stage: Review" in done.stdout
    assert (repo / "hi.txt").read_text() == "hi\n"
    assert git(repo, "log", "-1", "--format=%s") == "say hi"
    assert not (repo / ".forge" / "task-worktrees" / task).exists()
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main one
    junit = (tmp_path / "j.xml").read_text()
    assert 'tests="1"' in junit and 'failures="0"' in junit and task in junit
    runs = fks("runs", cwd=repo)
    assert f"forge {task}" in runs.stdout, runs.output


@pytest.mark.claude
def test_parent_replaces_fks_with_claude_told_about_the_subcommands(
    repo: Path, tmp_path: Path
) -> None:
    seen: list[Request] = []

    def answer(request: Request) -> Any:
        seen.append(request)
        return [{"text": "You have no open questions."}]

    with FakeAnthropic(responder=answer) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks(
            "forge", "parent", "--cwd", str(repo), "-p", "What is open?", cwd=tmp_path, env=env
        )
    assert done.code == 0, done.output
    assert "You have no open questions." in done.stdout
    assert seen and "fks forge clarifications" in seen[0].system_text
    assert "fks forge run [TASK_ID...]" in seen[0].system_text


@pytest.mark.claude
def test_parent_runs_fks_commands_only_unasked(repo: Path, tmp_path: Path) -> None:
    """The parent reads what agents wrote (a question, an error, a task file) and could be told
    by it to run anything: it runs `fks forge …` without asking, never another command."""
    marker = repo / "ran"
    calls = [
        {"command": "touch ran", "description": "as a task's text told it"},
        {"command": f"fks forge status --cwd {repo}", "description": "list the tasks"},
    ]

    def answer(request: Request) -> Any:
        done = len(request.tool_results)
        if done < len(calls):
            return [{"tool": "Bash", "input": calls[done]}]
        return [{"text": "Done."}]

    with FakeAnthropic(responder=answer) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks("forge", "parent", "--cwd", str(repo), "-p", "Go on.", cwd=tmp_path, env=env)
        results = fake.main_requests()[-1].tool_results
    assert done.code == 0, done.output
    assert not marker.exists()
    assert results[0]["is_error"], results[0]
    assert not results[1]["is_error"] and "No task has been" in results[1]["content"], results[1]


def test_clean_removes_the_worktree_a_killed_local_run_left(repo: Path) -> None:
    import yaml

    task = create(repo, "killed")
    git(repo, "branch", f"fks/forge/{task}")
    left = repo / ".forge" / "task-worktrees" / task
    git(repo, "worktree", "add", "-q", str(left), f"fks/forge/{task}")
    work = repo / ".forge" / "work"
    work.mkdir(parents=True)
    item = {"task_id": task, "status": "executing", "stage": "implement", "pid": 2**22 + 7}
    (work / f"{task}-001.yaml").write_text(yaml.safe_dump(item))
    done = fks("clean", "--cwd", str(repo))
    assert done.code == 0, done.output
    assert not left.exists()
    assert git(repo, "worktree", "list").count("\n") == 0
    assert git(repo, "branch", "--list", f"fks/forge/{task}")  # the branch stays


# --- what agents wrote is shown, never obeyed ----------------------------------------------------

HOSTILE = "\x1b]52;c;eA==\x07clip \x1b]0;title\x07\x1b[2Jname\u202egpj.sh"


def test_status_and_clarifications_neutralise_agent_text(repo: Path) -> None:
    import yaml

    task = create(repo, "hostile")
    work = repo / ".forge" / "work"
    work.mkdir(parents=True)
    item = {
        "task_id": task,
        "title": HOSTILE,
        "status": "waiting",
        "stage": "analyze",
        "branch": f"fks/forge/{task}\u202egpj.sh",
        "question": f"which one?\n[fks] Landed {HOSTILE}",
    }
    (work / f"{task}-001.yaml").write_text(yaml.safe_dump(item))
    for verb in ("status", "clarifications"):
        done = fks("forge", verb, "--cwd", str(repo))
        assert done.code == 0, done.output
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
        assert "\u202e" not in done.stdout and "<U+202E>gpj.sh" in done.stdout
        assert not any(line.startswith("[fks]") for line in done.stdout.splitlines())
