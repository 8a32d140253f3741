"""`fks forge run --sandbox` end to end: the real claude CLI in containers, against the fake
Messages API, which plays analyst, architect, implementer and reviewer (structured answers are
`StructuredOutput` tool calls)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fks_testing.claude import assert_no_secret, claude_env, containers, forge_repo, run_fks
from fks_testing.fakeapi import FakeAnthropic, Request
from fks_testing.helpers import eventually_none, git

pytestmark = [pytest.mark.docker, pytest.mark.claude]

TASK = re.compile(r"Task (TASK-[0-9a-z]+):")
STAGES = {
    "You analyze one task": "analyze",
    "The analysis of this task was not sufficient": "architect",
    "You implement one task": "implement",
    "You review the implementation of one task": "review",
}


def analysis(sufficient: bool = True) -> dict[str, Any]:
    return {
        "complexity": "low",
        "plan": "Write the file and commit it.",
        "relevant_files": [],
        "implementation_steps": ["write the file", "commit"],
        "context": "Plain text files.",
        "sufficient": sufficient,
    }


def structured(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tool": "StructuredOutput", "input": data}]


def bash(command: str) -> list[dict[str, Any]]:
    return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]


class Team:
    """Plays every forge agent; which task and stage a session is for comes from its prompts.

    - "alpha" is approved first time, "beta" is rejected once, "gamma" needs a clarification,
      "delta" writes the same file as alpha. Alpha's review waits until delta has implemented,
      so both branches start from the same base and the second to land conflicts.
    """

    def __init__(self) -> None:
        self.titles: dict[str, str] = {}  # task id -> title
        self.sessions: dict[str, tuple[str, str]] = {}
        self.reviews: dict[str, int] = {}
        self.delta_implemented = threading.Event()
        self.errors: list[str] = []
        self.conflict_reworks: list[str] = []

    def __call__(self, request: Request) -> Any:
        try:
            return self._answer(request)
        except Exception as exc:  # the fake must answer, or the CLI retries for minutes
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return [{"text": f"test responder failed: {exc!r}"}]

    def _answer(self, request: Request) -> Any:
        session = request.session_id or "?"
        if session in self.sessions and self.sessions[session][1] == "review":
            return self._judge(*self.sessions[session], request)
        if session in self.sessions:  # after a tool result: finish
            return [{"text": "Done."}]
        stage = next((s for mark, s in STAGES.items() if mark in request.system_text), None)
        found = TASK.search(request.prompt)
        if stage is None or found is None:
            self.errors.append(f"unknown request: {request.prompt[:200]!r}")
            return [{"text": "?"}]
        task = found.group(1)
        title = request.prompt.split(":", 1)[1].splitlines()[0].strip()
        self.titles[task] = title
        self.sessions[session] = (task, stage)
        return getattr(self, stage)(task, title, request)

    def analyze(self, task: str, title: str, request: Request) -> Any:
        return structured(analysis(sufficient=title != "gamma"))

    def architect(self, task: str, title: str, request: Request) -> Any:
        if "The human's answer: Use blue." in request.prompt:
            return structured({"resolved": True, "analysis": analysis()})
        return structured({"resolved": False, "question": "Which colour should gamma.txt say?"})

    def implement(self, task: str, title: str, request: Request) -> Any:
        if "conflicts with your previous implementation" in request.prompt:
            self.conflict_reworks.append(title)
            return bash(
                "printf 'alpha\\ndelta\\n' > shared.txt && git add -A && git commit -qm 'merge shared.txt'"
            )
        files = {
            "alpha": ("shared.txt", "alpha"),
            "beta": ("beta.txt", "beta v2" if "rejected" in request.prompt else "beta v1"),
            "gamma": ("gamma.txt", "blue"),
            "delta": ("shared.txt", "delta"),
        }
        name, text = files[title]
        if title == "delta":
            self.delta_implemented.set()
        check = "grep -q 'beta.txt must say v2' .forge/review.yaml && " if text == "beta v2" else ""
        return bash(
            f"test -f .forge/task.yaml && {check}printf '{text}\\n' > {name} && git add -A && git commit -qm '{title}: {name}'"
        )

    def review(self, task: str, title: str, request: Request) -> Any:
        """The diff is not in the prompt: read it from the file the prompt names."""
        assert ".forge/review.diff" in request.prompt and "diff --git" not in request.prompt
        return [{"tool": "Read", "input": {"file_path": ".forge/review.diff"}}]

    def _judge(self, task: str, stage: str, request: Request) -> Any:
        diff = json.dumps(request.tool_results)
        if "Structured output" in diff:
            return [{"text": "Done."}]
        title = self.titles[task]
        self.reviews[title] = self.reviews.get(title, 0) + 1
        if title == "alpha" and self.reviews[title] == 1:
            self.delta_implemented.wait(timeout=240)
        if title == "beta" and "beta v1" in diff:
            return structured({"approved": False, "issues": ["beta.txt must say v2"]})
        return structured({"approved": True, "issues": [], "suggestions": ["none"]})


@pytest.fixture
def fake() -> Iterator[tuple[FakeAnthropic, Team]]:
    team = Team()
    with FakeAnthropic(host="0.0.0.0", responder=team) as server:
        yield server, team


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    with forge_repo(
        tmp_path / "repo", {"parallel": 2, "maxReviewRetries": 2, "maxTurns": 5}
    ) as path:
        yield path


def create_tasks(repo: Path, titles: list[str]) -> dict[str, str]:
    ids = {}
    for title in titles:
        done = run_fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
        assert done.code == 0, done.tail()
        ids[title] = done.stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    return ids


def volumes(label: str) -> list[str]:
    out = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [v for v in out.split() if v.startswith("fks-ws-")]


def statuses(repo: Path) -> dict[str, str]:
    out = run_fks("tasks", "list", "--json", cwd=repo)
    assert out.code == 0, out.tail()
    return {t["title"]: t["status"] for t in json.loads(out.stdout)}


def work_item(repo: Path, task_id: str) -> dict[str, Any]:
    files = sorted((repo / ".forge" / "work").glob(f"{task_id}-*.yaml"))
    assert files, f"no work item for {task_id}"
    data = yaml.safe_load(files[-1].read_text())
    assert isinstance(data, dict)
    return data


def test_a_backlog_of_four_tasks_two_at_a_time(
    repo: Path, fake: tuple[FakeAnthropic, Team]
) -> None:
    server, team = fake
    ids = create_tasks(repo, ["alpha", "beta", "gamma", "delta"])
    env = claude_env(server)

    first = run_fks("forge", "run", "--sandbox", "--json", cwd=repo, env=env, timeout=600)
    assert not team.errors, team.errors
    assert first.code == 1, first.tail()  # gamma waits for an answer
    result = {t["title"]: t for t in first.json["tasks"]}
    assert result["gamma"]["status"] == "waiting", first.tail()
    assert {result[t]["status"] for t in ("alpha", "beta", "delta")} == {"completed"}, first.tail()
    assert result["beta"]["retries"] == 1 and result["beta"]["attempts"] == 2
    reworked = [t for t in ("alpha", "delta") if result[t]["retries"] == 1]
    assert len(reworked) == 1 and team.conflict_reworks == reworked, (result, team.conflict_reworks)
    assert statuses(repo) == {"alpha": "Done", "beta": "Done", "gamma": "Blocked", "delta": "Done"}

    listed = run_fks("forge", "clarifications", cwd=repo)
    assert "Which colour should gamma.txt say?" in listed.stdout, listed.tail()
    answered = run_fks("forge", "answer", ids["gamma"], "Use blue.", cwd=repo)
    assert answered.code == 0, answered.tail()

    second = run_fks("forge", "run", "--sandbox", cwd=repo, env=env, timeout=600)
    assert not team.errors, team.errors
    assert second.code == 0, second.tail()
    assert statuses(repo) == dict.fromkeys(("alpha", "beta", "gamma", "delta"), "Done")
    assert work_item(repo, ids["gamma"])["answer"] == "Use blue."

    # The base holds every approved task's work; shared.txt has both alpha's and delta's line.
    assert (repo / "shared.txt").read_text() == "alpha\ndelta\n"
    assert (repo / "beta.txt").read_text() == "beta v2\n"
    assert (repo / "gamma.txt").read_text() == "blue\n"
    log = git(repo, "log", "--format=%s", "main")
    landed_first = "delta" if reworked == ["alpha"] else "alpha"
    for subject in (
        f"{landed_first}: shared.txt",
        "merge shared.txt",
        "beta: beta.txt",
        "gamma: gamma.txt",
    ):
        assert subject in log
    changed = git(repo, "diff", "--name-only", "HEAD").splitlines()
    assert changed and all(path.startswith("forge/tasks/") for path in changed), changed
    assert containers(f"fks.repo={repo}") == []
    status = run_fks("forge", "status", cwd=repo)
    assert status.code == 0 and status.stdout.count("completed") == 4, status.tail()
    assert_no_secret(repo)


class SlowImplementer:
    """Analyzes, then takes its time implementing (until told to hurry), then approves."""

    def __init__(self) -> None:
        self.implementing = threading.Event()
        self.hurry = False
        self.sessions: set[str] = set()

    def __call__(self, request: Request) -> Any:
        session = request.session_id or "?"
        if session in self.sessions:
            return [{"text": "Done."}]
        self.sessions.add(session)
        system = request.system_text
        if "You analyze one task" in system:
            return structured(analysis())
        if "You implement one task" in system:
            self.implementing.set()
            work = bash("echo slow > slow.txt && git add -A && git commit -qm 'slow work'")
            return work if self.hurry else {"blocks": work, "delay": 120}
        return structured({"approved": True, "issues": []})


def test_ctrl_c_stops_every_container_keeps_the_branch_and_resume_finishes(
    repo: Path, tmp_path: Path
) -> None:
    import os
    import signal

    from fks_testing.fakeapi import isolated_environ
    from fks_testing.helpers import FKS

    ids = create_tasks(repo, ["slow"])
    team = SlowImplementer()
    with FakeAnthropic(host="0.0.0.0", responder=team) as server:
        process = subprocess.Popen(
            [FKS, "forge", "run", "--sandbox"],
            cwd=repo,
            env=isolated_environ(claude_env(server)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        # Its claude asked for the implementation from inside its container: that one runs.
        assert team.implementing.wait(timeout=180), "the implement stage never started"
        assert containers(f"fks.repo={repo}"), "no container runs the implement stage"
        os.kill(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=90)
        assert process.returncode == 130, stdout + stderr
        assert "fks forge run --resume" in stderr
        assert containers(f"fks.repo={repo}") == []
        # Its commits are on the task's branch: its workspace goes (in the background).
        eventually_none(lambda: volumes(f"fks.repo={repo}"), "the workspace")
        item = work_item(repo, ids["slow"])
        assert item["status"] == "interrupted" and item["stage"] == "implement"
        assert f"fks/forge/{ids['slow']}" in git(repo, "branch", "--list", "fks/forge/*")
        status = run_fks("forge", "status", cwd=repo)
        assert "interrupted" in status.stdout, status.tail()

        team.hurry = True
        resumed = run_fks("forge", "run", "--sandbox", "--resume", cwd=repo, env=claude_env(server))
        assert resumed.code == 0, resumed.tail()
    assert (repo / "slow.txt").read_text() == "slow\n"
    assert work_item(repo, ids["slow"])["status"] == "completed"
    assert containers(f"fks.repo={repo}") == []
