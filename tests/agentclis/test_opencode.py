"""The real OpenCode run locally by fks with its Anthropic provider against the fake Messages
API: completion on the marker with its commit and a readable transcript, a refused key, and
fks's turn limit (OpenCode's own is only a prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.agentclis import (
    DONE_TEXT,
    SHELL_COMMIT,
    assert_transcript,
    cli_env,
    cli_project,
    last_iteration,
    run_cli,
)
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import git

pytestmark = pytest.mark.agentcli
MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-api03-opencodeFakeKey" + "x" * 20


def bash(command: str) -> dict[str, object]:
    return {"tool": "bash", "input": {"command": command, "description": "run"}}


def anthropic_env(fake: FakeAnthropic) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake.url}


def test_an_opencode_step_completes_on_the_marker_and_its_commit_lands(
    agent_clis: Path, tmp_path: Path
) -> None:
    repo = cli_project(tmp_path / "repo", "opencode", model=MODEL)
    script = [[[{"text": "Working."}, bash(SHELL_COMMIT)], [{"text": DONE_TEXT}]]]
    with FakeAnthropic({"conversations": script}) as api:
        env = cli_env(agent_clis, tmp_path / "home", anthropic_env(api))
        done = run_cli(repo, "worker:2", env)
        first = api.main_requests()[0]
    assert done.code == 0, done.output
    assert "agent: add f" in git(repo, "log", "--format=%s")
    it = last_iteration(repo)
    assert it["reason"] == "marker", it
    assert it["claude"]["input_tokens"] and it["claude"]["output_tokens"], it
    assert first.body["model"] == MODEL
    assert "FORKHESTRA_COMPLETE" in str(first.body), "fks's instructions reach the model"
    assert KEY not in done.output
    assert_transcript(repo, env, "OpenCode", command="echo hi")


def test_a_refused_key_ends_an_opencode_step_as_auth_error(
    agent_clis: Path, tmp_path: Path
) -> None:
    repo = cli_project(tmp_path / "repo", "opencode", model=MODEL)
    with FakeAnthropic({"conversations": [[{"error": 401}]]}) as api:
        env = cli_env(agent_clis, tmp_path / "home", anthropic_env(api))
        done = run_cli(repo, "worker:3", env)
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "auth_error"
    assert "ANTHROPIC_API_KEY" in done.output, done.output


def test_fks_stops_opencode_at_the_agents_max_turns(agent_clis: Path, tmp_path: Path) -> None:
    repo = cli_project(tmp_path / "repo", "opencode", model=MODEL, maxTurns=2)
    always = [[bash("echo again")] for _ in range(50)]
    with FakeAnthropic({"conversations": [always]}) as api:
        env = cli_env(agent_clis, tmp_path / "home", anthropic_env(api))
        done = run_cli(repo, "worker:1", env)
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "max_turns"


def test_the_marker_in_a_tools_output_is_not_opencode_saying_it() -> None:
    from sandbox_runner.agentclis.opencode import OpenCodeParser

    parser = OpenCodeParser()
    state = {"status": "completed", "input": {"command": "cat x"}, "output": "FORKHESTRA_COMPLETE"}
    for event in (
        {"type": "step_start", "sessionID": "s", "part": {}},
        {"type": "tool_use", "sessionID": "s", "part": {"tool": "bash", "state": state}},
        {
            "type": "step_finish",
            "sessionID": "s",
            "part": {"reason": "tool-calls", "tokens": {"input": 5, "output": 1}, "cost": 0.01},
        },
    ):
        parser.feed_line(json.dumps(event))
    assert not parser.marker_seen
    assert parser.turns == 1 and parser.running_cost == 0.01
