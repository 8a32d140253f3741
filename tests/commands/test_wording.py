"""Messages as a user reads them: singular and plural, no "Warning" on a failure, one cost
format, snake_case JSON keys, help metavars in one style, and `fks forge create` taking what
`forge-tasks create` takes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import FKS, fks, git, init_repo

COMMANDS = [
    ["run"], ["chains"], ["validate"], ["init"], ["runs"], ["show"], ["logs"], ["review"],
    ["clean"], ["image", "build"], ["image", "push"], ["forge", "run"], ["forge", "status"],
    ["forge", "clarifications"], ["forge", "answer"], ["forge", "create"], ["schema"],
    ["tasks", "create"], ["tasks", "list"], ["tasks", "view"], ["tasks", "edit"],
]  # fmt: skip


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for k, v in value.items() for k in (k, *_keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_json_keys_are_snake_case(project: Path) -> None:
    for args in (["fake:2", "--json"], ["fake:2", "--json", "--dry-run"]):
        done = fks("run", *args, cwd=project)
        assert done.code == 0, done.output
        keys = _keys(json.loads(done.stdout))
        assert keys and all(re.fullmatch(r"[a-z0-9_]+", k) for k in keys), keys


def test_plural_and_reasons_read_right(project: Path) -> None:
    init_repo(project)
    done = fks("run", "fake:3", "--no-progress-limit", "1", env={"FAKE_MARKER_AT": "0"})
    assert done.code == 1, done.output
    assert "stopped after 1 iteration: no commit" in done.stdout
    assert "1 iterations" not in done.output


def test_a_running_and_an_interrupted_run_read_right(project: Path) -> None:
    proc = subprocess.Popen(
        [FKS, "run", "fake:1"],
        cwd=project,
        env={**os.environ, "FAKE_SLEEP": "300"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pid = project.parent / "state" / "pid"
        deadline = time.monotonic() + 240
        while not pid.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        row = fks("runs", cwd=project).stdout.splitlines()[1]
        assert re.search(r"\s\d+\.\ds\s+running\s+0/1\s+\$0\.0000$", row), row
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    shown = fks("show", "last", cwd=project).stdout
    assert re.search(r"status:     interrupted(,|\n)", shown) and "(interrupted)" not in shown
    assert "cost:       $0.0000" in shown


def test_help_metavars_are_one_style() -> None:
    for command in COMMANDS:
        done = fks(*command, "--help", env={"COLUMNS": "200"})
        assert done.code == 0, done.output
        listed = done.stdout.split("\nOptions:\n", 1)[1].splitlines()
        options = [line for line in listed if line.lstrip().startswith("-")]
        for line in options:
            spec = line.strip().split("  ")[0]  # "-i, --iteration N"
            metavars = [w for w in spec.replace(",", " ").split() if not w.startswith("-")]
            assert all(re.fullmatch(r"[A-Z][A-Z_\[\]:.=]*", m) for m in metavars), (command, line)


def test_forge_create_takes_what_forge_tasks_create_takes(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    first = fks("forge", "create", "Base", cwd=repo).stdout.split()[-1]
    done = fks(
        "forge", "create", "Login page", "--ac", "shows a form", "--ac", "posts it",
        "--priority", "high", "--label", "ui,auth", "--depends-on", first, cwd=repo,
    )  # fmt: skip
    assert done.code == 0, done.output
    task = done.stdout.split()[-1]
    view = json.loads(fks("tasks", "view", task, "--json", cwd=repo).stdout)
    assert view["priority"] == "high" and view["labels"] == ["ui", "auth"]
    assert view["dependencies"] == [first]
    assert [c["text"] for c in view["acceptance_criteria"]] == ["shows a form", "posts it"]


def test_answer_for_an_unknown_task_says_there_is_no_such_task(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    done = fks("forge", "answer", "TASK-nosuch", "yes", cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr.startswith("fks: no task TASK-nosuch")
    assert "open question" not in done.stderr


def _idle_team(request: Request) -> Any:
    """Analyze and approve; Implement commits nothing (the task fails)."""
    if any(r for r in request.tool_results):
        return [{"text": "Done."}]
    if "You analyze one task" in request.system_text:
        plan = {"complexity": "low", "plan": "Write it.", "sufficient": True}
        return [{"tool": "StructuredOutput", "input": plan}]
    return [{"text": "Nothing to do."}]


@pytest.mark.claude
def test_a_failed_forge_task_is_no_warning(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    task = fks("forge", "create", "Say hi", cwd=repo).stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    with FakeAnthropic(responder=_idle_team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        done = fks("forge", "run", cwd=repo, env=env, timeout=600)
    assert done.code == 1, done.output
    assert f"[{task}] [fks] Failed: " in done.stdout
    assert "Warning: Failed" not in done.output
    assert re.search(rf"\[fks\] {task} failed: .*; 1 attempt, \$", done.stdout), done.stdout
    assert "attempt(s)" not in done.output and "1 task," in done.stdout


@pytest.mark.docker
def test_a_mistyped_image_gets_a_did_you_mean(project: Path) -> None:
    init_repo(project)
    done = fks("run", "--sandbox", "--image", "fks-agnet:latest", "fake", cwd=project)
    assert done.code == 2, done.output
    assert "Image 'fks-agnet:latest' not found (did you mean 'fks-agent:latest'?)" in done.stderr
    assert "build it with" not in done.stderr
