"""A task of a `fks forge run --sandbox` session cannot change the sandbox of the tasks after it
by landing a `forge/chains.json` or a devcontainer: the session's workers keep the settings and
the image it started with."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.claude import claude_env, forge_repo, run_fks
from fks_testing.fakeapi import FakeAnthropic, Request
from fks_testing.helpers import git, write_config

from sandbox_runner import docker_daemon
from sandbox_runner.images import devcontainer, lookup

pytestmark = [pytest.mark.docker, pytest.mark.claude]

SECRET = "host-only-9f3c"
TASK = re.compile(r"Task (TASK-[0-9a-z]+):")


def _structured(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tool": "StructuredOutput", "input": data}]


def _bash(command: str) -> list[dict[str, Any]]:
    return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]


class Lander:
    """Plays every forge agent. The first task to be implemented runs `first`, each later one
    `later` (`{task}` is the task's id): the first lands a change, the later ones show what it
    did to their sandbox in their commit."""

    def __init__(self, first: str, later: str) -> None:
        self.commands = (first, later)
        self.implemented = 0

    def __call__(self, request: Request) -> Any:
        system = request.system_text
        stage = next((s for s in ("analyze", "implement", "review") if f"You {s}" in system), "")
        if request.tool_results:  # the answer to its tool call: finish
            return self._approve(request) if stage == "review" else [{"text": "Done."}]
        if stage == "analyze":
            plan = {"complexity": "low", "plan": "Write a file.", "sufficient": True}
            return _structured({**plan, "relevant_files": [], "implementation_steps": ["write"]})
        if stage == "review":
            return [{"tool": "Read", "input": {"file_path": ".forge/review.diff"}}]
        if stage != "implement":
            return [{"text": "Done."}]
        found = TASK.search(request.prompt)
        command = self.commands[min(self.implemented, 1)]
        self.implemented += 1
        task = found.group(1) if found else "unknown"
        return _bash(command.replace("{task}", task) + " && git add -A && git commit -qm 'work'")

    def _approve(self, request: Request) -> Any:
        if "Structured output" in json.dumps(request.tool_results):
            return [{"text": "Done."}]
        return _structured({"approved": True, "issues": [], "suggestions": []})


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    with forge_repo(tmp_path / "repo", {"parallel": 1, "maxTurns": 5}) as path:
        yield path


def test_a_landed_config_never_widens_the_sandbox_of_the_sessions_later_tasks(
    repo: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_ed25519").write_text(SECRET + "\n")
    _create_tasks(repo, "one", "two")
    wider = {"forge": {"parallel": 1, "maxTurns": 5}, "sandbox": {"mounts": [str(private)]}}
    lander = Lander(
        f"printf '%s' '{json.dumps(wider)}' > forge/chains.json && echo first > {{task}}.txt",
        f"(cat {private}/* 2>/dev/null || echo nothing) > {{task}}.txt",
    )
    with FakeAnthropic(host="0.0.0.0", responder=lander) as server:
        done = run_fks("forge", "run", "--sandbox", cwd=repo, env=claude_env(server), timeout=600)
    assert done.code == 0, done.tail()
    # The first task's config landed (the next session reads it; review it first) …
    assert str(private) in (repo / "forge" / "chains.json").read_text()
    # … but the second task ran with the settings the session started with.
    assert _task_files(repo) == ["first\n", "nothing\n"], done.tail()
    assert SECRET not in git(repo, "log", "-p", "main")


def _create_tasks(repo: Path, *titles: str) -> None:
    for title in titles:
        done = run_fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
        assert done.code == 0, done.tail()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")


def _task_files(repo: Path) -> list[str]:
    """The texts of the tasks' files, in the order they landed."""
    names = git(repo, "log", "--reverse", "--format=", "--name-only", "--diff-filter=A", "main")
    return [(repo / n).read_text() for n in names.split() if re.fullmatch(r"TASK-\w+\.txt", n)]


def _local_base() -> str:
    labels = docker_daemon.docker_client().images.get(lookup.DEFAULT_AGENT_IMAGE).labels
    return str(labels["org.opencontainers.image.base.name"])


def test_a_landed_devcontainer_never_builds_the_image_of_the_sessions_later_tasks(
    repo: Path, tmp_path: Path
) -> None:
    """With `sandbox.image: devcontainer`, the image is built once, when the session starts: a
    task that lands a devcontainer.json (or a Dockerfile, whose RUN lines a build runs on an
    open network) does not make the next task's image."""
    spec = {"image": _local_base(), "containerEnv": {"ORIGIN": "the session's"}}
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text(json.dumps(spec))
    write_config(
        repo, {"forge": {"parallel": 1, "maxTurns": 5}, "sandbox": {"image": "devcontainer"}}
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a devcontainer")
    _create_tasks(repo, "one", "two")
    landed = {**spec, "containerEnv": {"ORIGIN": "the landed"}}
    lander = Lander(
        f"printf '%s' '{json.dumps(landed)}' > .devcontainer/devcontainer.json && "
        'echo "$ORIGIN" > {task}.txt',
        'echo "$ORIGIN" > {task}.txt',
    )
    try:
        with FakeAnthropic(host="0.0.0.0", responder=lander) as server:
            done = run_fks(
                "forge", "run", "--sandbox", cwd=repo, env=claude_env(server), timeout=1200
            )
        assert done.code == 0, done.tail()
        assert "the landed" in (repo / ".devcontainer" / "devcontainer.json").read_text()
        assert _task_files(repo) == ["the session's\n", "the session's\n"], done.tail()
        assert done.stderr.count("fks: devcontainer image ") == 1, done.tail()
    finally:
        _remove_devcontainer_images(repo)


def _remove_devcontainer_images(repo: Path) -> None:
    file = repo / ".devcontainer" / "devcontainer.json"
    prefix = f"fks-agent:devcontainer-{devcontainer._slug(file)}-"
    client = docker_daemon.docker_client()
    made = [t for image in client.images.list() for t in image.tags if t.startswith(prefix)]
    if made:
        subprocess.run(["docker", "rmi", *made], capture_output=True, check=False)
