"""The real Codex CLI run locally by fks against the fake Responses API: completion on the
marker with its commit and a readable transcript, a refused key, and fks's turn limit."""

from __future__ import annotations

import json
import socket
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
MODEL = "gpt-5-mini"
"""A model Codex knows (its default model's requests have another shape)."""


def test_a_codex_step_completes_on_the_marker_and_its_commit_lands(
    agent_clis: Path, tmp_path: Path
) -> None:
    repo = cli_project(tmp_path / "repo", "codex", model=MODEL)
    script = [[{"text": "Working."}, {"shell": SHELL_COMMIT}], [{"text": DONE_TEXT}]]
    with FakeModelApi("openai", script) as api:
        env = cli_env(agent_clis, tmp_path / "home", api.env())
        done = run_cli(repo, "worker:2", env)
        body = api.requests[0][1]
    assert done.code == 0, done.output
    assert "agent: add f" in git(repo, "log", "--format=%s")
    it = last_iteration(repo)
    assert it["reason"] == "marker", it
    stats = it["claude"]
    assert stats["input_tokens"] == 200 and stats["output_tokens"] == 40, stats
    assert stats["cost_usd"] and stats["cost_usd"] > 0, stats
    assert body["model"] == MODEL
    assert "FORKHESTRA_COMPLETE" in str(body), "fks's instructions reach the model"
    assert_transcript(repo, env, "Codex", command="/bin/bash -lc")


def test_a_refused_key_ends_a_codex_step_as_auth_error(agent_clis: Path, tmp_path: Path) -> None:
    repo = cli_project(tmp_path / "repo", "codex", model=MODEL)
    with FakeModelApi("openai", [{"error": 401}]) as api:
        done = run_cli(repo, "worker:3", cli_env(agent_clis, tmp_path / "home", api.env()))
        requests = len(api.requests)
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "auth_error"
    assert "OPENAI_API_KEY" in done.output, done.output
    assert requests == 1, "no retries of a refused key"


def test_an_api_codex_cannot_reach_ends_the_step_at_once(agent_clis: Path, tmp_path: Path) -> None:
    """Codex waits for an API it cannot connect to without end, whatever its retry settings:
    fks stops it at its first such wait, as api_unreachable, naming the variable."""
    repo = cli_project(tmp_path / "repo", "codex", model=MODEL)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = cli_env(
        agent_clis,
        tmp_path / "home",
        {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"},
    )
    done = run_cli(repo, "worker:3", env)
    assert done.code == 1, done.output
    it = last_iteration(repo)
    assert it["number"] == 1 and it["reason"] == "api_unreachable", done.output
    assert "OPENAI_BASE_URL (Codex)" in done.output, done.output


def test_a_model_fks_has_no_price_for_still_holds_the_budget_locally(
    agent_clis: Path, tmp_path: Path
) -> None:
    """A model name of no family in fks's table costs its dearest price (as at the egress
    proxy): the budget still stops the step, after the iteration that crossed it."""
    repo = cli_project(tmp_path / "repo", "codex", model="gpt-9-turbo")
    with FakeModelApi("openai", forever=[{"text": "Still working."}]) as api:
        env = cli_env(agent_clis, tmp_path / "home", api.env())
        done = run_cli(repo, "worker:3", env, "--max-cost", "0.00002", "--no-progress-limit", "0")
    assert done.code == 1, done.output
    it = last_iteration(repo)
    assert it["number"] == 1 and it["claude"]["cost_usd"] > 0.00002, it
    assert "--max-cost" in done.output, done.output


def test_fks_stops_codex_at_the_agents_max_turns(agent_clis: Path, tmp_path: Path) -> None:
    repo = cli_project(tmp_path / "repo", "codex", model=MODEL, maxTurns=2)
    with FakeModelApi("openai", forever=[{"shell": "echo again"}]) as api:
        done = run_cli(repo, "worker:1", cli_env(agent_clis, tmp_path / "home", api.env()))
    assert done.code == 1, done.output
    assert last_iteration(repo)["reason"] == "max_turns"
    assert "maxTurns" in done.output, done.output


def test_the_marker_in_a_commands_output_is_not_codex_saying_it() -> None:
    from sandbox_runner.agentclis.codex import CodexParser

    parser = CodexParser("gpt-5")
    command = {"id": "i", "type": "command_execution", "command": "cat PROMPT.md"}
    output = {**command, "aggregated_output": "FORKHESTRA_COMPLETE\n", "exit_code": 0}
    for event in (
        {"type": "item.started", "item": command},
        {"type": "item.completed", "item": output},
        {
            "type": "item.completed",
            "item": {"type": "agent_message", "text": "FORKHESTRA_COMPLETE is the marker."},
        },
    ):
        parser.feed_line(json.dumps(event))
    assert not parser.marker_seen
    assert parser.turns == 1
