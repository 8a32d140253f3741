"""`fks forge run` with stages of different agent CLIs, locally: OpenCode analyzes (its answer a
JSON block, asked once more when it does not fit) and implements, Claude reviews (its answer
a `--json-schema` structured output); both real CLIs against the fake Messages API. The task
lands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fks_testing.agentclis import cli_env
from fks_testing.fakeapi import FakeAnthropic, Request
from fks_testing.helpers import fks, git, init_repo, write_config

pytestmark = [pytest.mark.agentcli, pytest.mark.claude]
KEY = "sk-ant-api03-forgeClis" + "x" * 20
STAGES = {
    "You analyze one task": "analyze",
    "You implement one task": "implement",
    "You review the implementation of one task": "review",
}
ANALYSIS = {
    "complexity": "low",
    "plan": "Write x.txt and commit it.",
    "relevant_files": [],
    "implementation_steps": ["write x.txt", "commit"],
    "context": "Plain text files.",
    "sufficient": True,
}


class Team:
    """Answers each stage's agent by the system prompt it carries."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.analyses = 0
        self.told_why = False

    def __call__(self, request: Request) -> Any:
        text = request.system_text or json.dumps(request.body)
        stage = next((s for mark, s in STAGES.items() if mark in text), None)
        if stage is None:
            return [{"text": "ok"}]
        self.stages.append(stage)
        if request.tool_results:
            return [{"text": "Done."}]
        if stage == "analyze":
            self.analyses += 1
            if self.analyses == 1:  # no block: asked once more, naming why
                return [{"text": "It is a small task."}]
            self.told_why = "did not fit (the agent gave no structured answer)" in request.prompt
            block = json.dumps(ANALYSIS)
            return [{"text": f"The plan.\n```json\n{block}\n```"}]
        if stage == "implement":
            command = "printf 'x\\n' > x.txt && git add -A && git commit -qm 'x: add x.txt'"
            return [{"tool": "bash", "input": {"command": command, "description": "work"}}]
        verdict = {"approved": True, "issues": [], "suggestions": []}
        return [{"tool": "StructuredOutput", "input": verdict}]


@pytest.mark.timeout(600)
def test_a_task_implemented_by_opencode_and_reviewed_by_claude_lands(
    agent_clis: Path, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    agents = {"oc": {"cli": "opencode", "model": "claude-sonnet-4-5"}}
    forge = {"agents": {"analyze": "oc", "implement": "oc"}, "maxTurns": 5}
    write_config(repo, {"agents": agents, "forge": forge})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fks config")
    team = Team()
    with FakeAnthropic(responder=team) as api:
        env = cli_env(
            agent_clis, tmp_path / "home", {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url}
        )
        created = fks("forge", "create", "x", "--description", "Add x.txt", cwd=repo, env=env)
        assert created.code == 0, created.output
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "task")
        done = fks("forge", "run", cwd=repo, env=env, timeout=540)
    assert done.code == 0, done.output[-4000:]
    assert "x: add x.txt" in git(repo, "log", "--format=%s", "main")
    assert (repo / "x.txt").read_text() == "x\n"
    assert team.analyses == 2 and team.told_why, team.stages
    assert {"analyze", "implement", "review"} <= set(team.stages)
