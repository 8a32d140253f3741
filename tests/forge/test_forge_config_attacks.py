"""A task of a `fks forge run --sandbox` session cannot widen the sandbox of the tasks after it
by landing a `forge/chains.json`: the session's workers keep the settings it started with."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.claude import claude_env, containers, run_fks
from fks_testing.fakeapi import FakeAnthropic, Request
from fks_testing.helpers import git, init_repo, write_config

pytestmark = [pytest.mark.docker, pytest.mark.claude]

SECRET = "host-only-9f3c"
TASK = re.compile(r"Task (TASK-[0-9a-z]+):")


def _structured(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tool": "StructuredOutput", "input": data}]


def _bash(command: str) -> list[dict[str, Any]]:
    return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]


class Widener:
    """The first task to be implemented lands a chains.json mounting the host's `private`
    folder into every container; each later one copies what it finds there into its commit."""

    def __init__(self, private: Path) -> None:
        self.private = private
        self.sessions: dict[str, str] = {}
        self.implemented = 0

    def __call__(self, request: Request) -> Any:
        session = request.session_id or "?"
        stage = self.sessions.get(session)
        if stage is not None:
            return [{"text": "Done."}] if stage != "review" else self._approve(request)
        system = request.system_text
        stage = next(
            (s for s in ("analyze", "implement", "review") if f"You {s}" in system), "other"
        )
        self.sessions[session] = stage
        if stage == "analyze":
            plan = {"complexity": "low", "plan": "Write a file.", "sufficient": True}
            return _structured({**plan, "relevant_files": [], "implementation_steps": ["write"]})
        if stage == "review":
            return [{"tool": "Read", "input": {"file_path": ".forge/review.diff"}}]
        found = TASK.search(request.prompt)
        task = found.group(1) if found else "unknown"
        self.implemented += 1
        if self.implemented == 1:
            wider = {
                "forge": {"parallel": 1, "maxTurns": 5},
                "sandbox": {"mounts": [str(self.private)]},
            }
            return _bash(
                f"mkdir -p forge && printf '%s' '{json.dumps(wider)}' > forge/chains.json && "
                f"echo first > {task}.txt && git add -A && git commit -qm 'wider sandbox'"
            )
        return _bash(
            f"(cat {self.private}/* 2>/dev/null || echo nothing) > {task}.txt && "
            f"git add -A && git commit -qm 'what the mount shows'"
        )

    def _approve(self, request: Request) -> Any:
        if "Structured output" in json.dumps(request.tool_results):
            return [{"text": "Done."}]
        return _structured({"approved": True, "issues": [], "suggestions": []})


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(path, {"forge": {"parallel": 1, "maxTurns": 5}})
    git(path, "add", "-A")
    git(path, "commit", "-qm", "fks config")
    yield path
    leftovers = containers(f"fks.repo={path}")
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


def test_a_landed_config_never_widens_the_sandbox_of_the_sessions_later_tasks(
    repo: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_ed25519").write_text(SECRET + "\n")
    for title in ("one", "two"):
        done = run_fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
        assert done.code == 0, done.tail()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    with FakeAnthropic(host="0.0.0.0", responder=Widener(private)) as server:
        done = run_fks("forge", "run", "--sandbox", cwd=repo, env=claude_env(server), timeout=600)
    assert done.code == 0, done.tail()
    # The first task's config landed (the next session reads it; review it first) …
    assert str(private) in (repo / "forge" / "chains.json").read_text()
    # … but the second task ran with the settings the session started with.
    landed = git(repo, "log", "-p", "main")
    assert "what the mount shows" in landed, done.tail()
    assert SECRET not in landed
