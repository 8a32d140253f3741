"""The real Gemini CLI run locally by fks against the fake streamGenerateContent API: completion
on a marker that arrives in two pieces, with its commit and a readable transcript, a refused
key, and its own turn limit set from the agent's maxTurns."""

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
from fks_testing.fakemodels import FakeModelApi
from fks_testing.helpers import git

pytestmark = pytest.mark.agentcli
MODEL = "gemini-2.5-flash"


def test_a_gemini_step_completes_on_a_split_marker_and_its_commit_lands(
    agent_clis: Path, tmp_path: Path
) -> None:
    repo = cli_project(tmp_path / "repo", "gemini", model=MODEL)
    script = [[{"text": "Working."}, {"shell": SHELL_COMMIT}], [{"text": DONE_TEXT}]]
    with FakeModelApi("gemini", script) as api:
        env = cli_env(agent_clis, tmp_path / "home", api.env())
        done = run_cli(repo, "worker:2", env)
        paths = [path for path, _ in api.requests]
        first = api.requests[0][1]
    assert done.code == 0, done.output
    assert "agent: add f" in git(repo, "log", "--format=%s")
    it = last_iteration(repo)
    assert it["reason"] == "marker", it
    assert it["claude"]["input_tokens"] == 200 and it["claude"]["cost_usd"] > 0, it
    assert f"/models/{MODEL}:streamGenerateContent" in paths[0]
    assert "FORKHESTRA_COMPLETE" in str(first), "fks's instructions reach the model"
    assert_transcript(repo, env, "Gemini CLI", command="echo hi")


def test_a_refused_key_ends_a_gemini_step_as_auth_error(agent_clis: Path, tmp_path: Path) -> None:
    repo = cli_project(tmp_path / "repo", "gemini", model=MODEL)
    with FakeModelApi("gemini", [{"error": 401}]) as api:
        done = run_cli(repo, "worker:3", cli_env(agent_clis, tmp_path / "home", api.env()))
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "auth_error"
    assert "GEMINI_API_KEY" in done.output, done.output


def test_gemini_stops_at_the_agents_max_turns(agent_clis: Path, tmp_path: Path) -> None:
    repo = cli_project(tmp_path / "repo", "gemini", model=MODEL, maxTurns=2)
    with FakeModelApi("gemini", forever=[{"shell": "echo again"}]) as api:
        done = run_cli(repo, "worker:1", cli_env(agent_clis, tmp_path / "home", api.env()))
        calls = api.main_count
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "max_turns"
    assert calls <= 3, calls


def test_the_marker_in_a_tools_output_is_not_gemini_saying_it() -> None:
    from sandbox_runner.agentclis.gemini import GeminiParser

    parser = GeminiParser()
    events = [
        {"type": "message", "role": "user", "content": "FORKHESTRA_COMPLETE"},
        {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "t", "parameters": {}},
        {
            "type": "tool_result",
            "tool_id": "t",
            "status": "success",
            "output": "FORKHESTRA_COMPLETE",
        },
        {"type": "message", "role": "assistant", "content": "Not FORKHESTRA_", "delta": True},
        {"type": "message", "role": "assistant", "content": "COMPLETE yet.", "delta": True},
    ]
    for event in events:
        parser.feed_line(json.dumps(event))
    parser.close()
    assert not parser.marker_seen
