"""Why iterations end, as a user sees it: the real claude CLI on the host against the fake
Messages API (a turn limit, refused credentials, an unreachable API), and a silent agent."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import Result, commit_scripts, fks, git, init_repo, write_config

from sandbox_runner.plan.prompts import MARKER


def bash(command: str) -> dict[str, Any]:
    return {"tool": "Bash", "input": {"command": command, "description": "run"}}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    write_config(
        path,
        {
            "agents": {
                "worker": {"systemPromptText": "You work.", "maxTurns": 10},
                "limited": {"systemPromptText": "You work briefly.", "maxTurns": 1},
            }
        },
    )
    git(path, "add", "-A")
    git(path, "commit", "-qm", "config")
    return path


def record(repo: Path) -> dict[str, Any]:
    (run_dir,) = (repo / ".forge" / "runs").iterdir()
    data = json.loads((run_dir / "run.json").read_text())
    assert isinstance(data, dict)
    return data


def reasons(data: dict[str, Any], step: int = 1) -> list[str]:
    return [it["reason"] for it in data["steps"][step - 1]["iterations"]]


def claude_run(
    repo: Path, fake: FakeAnthropic, *args: str, **env: str
) -> tuple[Result, dict[str, Any]]:
    # The CLI's own retries (minutes of back-off on a 401 or a refused connection) are off.
    retries = {"CLAUDE_CODE_MAX_RETRIES": "0"}
    full = isolated_environ({**fake.env(repo.parent / "claude"), **retries, **env})
    done = fks("run", *args, "--prompt", "Go.", cwd=repo, env=full, timeout=300)
    return done, record(repo)


@pytest.mark.claude
def test_a_turn_limit_ends_the_iteration_as_max_turns_with_the_fix(repo: Path) -> None:
    with FakeAnthropic([[[bash("echo one")], [bash("echo two")]], [[f"Done.\n{MARKER}"]]]) as fake:
        done, data = claude_run(repo, fake, "limited:2")
    assert done.code == 0, done.output
    assert reasons(data) == ["max_turns", "marker"], done.output
    assert (
        "Iteration 1 hit the turn limit (error_max_turns): raise the agent's maxTurns"
        in done.stdout
    ), done.stdout
    assert "did not print the marker" not in done.output
    shown = fks("show", data["id"], cwd=repo)
    assert "reason max_turns" in shown.stdout and "ended: Iteration 1 hit the turn limit" in (
        shown.stdout
    ), shown.output


@pytest.mark.claude
def test_a_step_whose_every_iteration_hit_the_turn_limit_says_so_with_the_fix(
    repo: Path,
) -> None:
    """Both iterations stopped at maxTurns: the step's lines name that cause and its fix, not
    a marker the agent never had the turns to print."""
    turns = [[bash("echo one")], [bash("echo two")]]
    with FakeAnthropic([turns, [[bash("echo three")], [bash("echo four")]]]) as fake:
        done, data = claude_run(repo, fake, "limited:2")
    assert done.code == 1, done.output
    assert reasons(data) == ["max_turns", "max_turns"], done.output
    cause = (
        "stopped after 2/2 iterations: every one stopped at maxTurns (1) (max_turns): raise "
        "the agent's maxTurns in forge/chains.json, or give it a smaller task"
    )
    assert f"[fks] Incomplete: limited {cause}" in done.stdout, done.stdout
    assert f"[fks] Step 1 (limited) did not complete: {cause}" in done.stdout, done.stdout
    assert "did not print the marker" not in done.output
    assert done.stdout.rstrip().splitlines()[-1].startswith("[fks] Chain incomplete (0/1 steps")


@pytest.mark.claude
def test_refused_credentials_stop_the_step_at_once_naming_the_key(repo: Path) -> None:
    with FakeAnthropic(
        [[{"error": 401, "times": "forever", "message": "invalid x-api-key"}]]
    ) as fake:
        done, data = claude_run(repo, fake, "worker:5")
        assert len(fake.main_requests()) == 1, "a second iteration asked the API again"
    assert done.code == 1, done.output
    assert reasons(data) == ["auth_error"], done.output
    assert data["steps"][0]["reason"] == "auth_error"
    assert "the API refused the credentials" in done.stdout, done.output
    assert "check the agent's key: ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN" in done.stdout
    assert "did not print the marker" not in done.output


@pytest.mark.claude
def test_an_unreachable_api_stops_the_step_naming_the_url(repo: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with FakeAnthropic() as fake:
        done, data = claude_run(
            repo,
            fake,
            "worker:5",
            ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        )
    assert done.code == 1, done.output
    assert reasons(data) == ["api_unreachable"], done.output
    assert "could not reach the API" in done.stdout and "ANTHROPIC_BASE_URL (Claude" in done.stdout
    assert "did not print the marker" not in done.output


@pytest.mark.claude
def test_a_step_without_n_moves_on_but_says_its_agent_failed(repo: Path) -> None:
    with FakeAnthropic([[{"error": 401, "times": "forever"}]]) as fake:
        done, data = claude_run(repo, fake, "worker")
    assert done.code == 0, done.output  # the seed's rule: a step without :N moves on
    assert reasons(data) == ["auth_error"]
    assert "Agent failed: worker (exit 1, auth_error)" in done.stdout, done.output
    assert "Done: worker" not in done.stdout


STALLING_AGENT = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count
echo "working on $n"
if [ "$n" -ge 2 ]; then echo FORKHESTRA_COMPLETE; exit 0; fi
exec sleep 100
"""


def test_an_agent_without_output_is_stopped_as_stalled(tmp_path: Path) -> None:
    repo = commit_scripts(init_repo(tmp_path / "repo"), {"agent.sh": STALLING_AGENT})
    write_config(repo, {"stallTimeout": 1})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    (repo / ".git" / "info" / "exclude").write_text("count\n")
    done = fks("run", "./scripts/agent.sh:3", cwd=repo, timeout=60)
    assert done.code == 0, done.output
    data = record(repo)
    assert reasons(data) == ["stalled", "marker"], done.output
    assert "Iteration 1 stalled: no output for 1s, so fks stopped it" in done.stdout
    assert "stallTimeout" in done.stdout
    shown = fks("show", data["id"], cwd=repo)
    assert "reason stalled" in shown.stdout and "ended: Iteration 1 stalled" in shown.stdout


def test_a_step_without_n_that_stalls_is_incomplete_and_says_why(tmp_path: Path) -> None:
    repo = commit_scripts(init_repo(tmp_path / "repo"), {"agent.sh": STALLING_AGENT})
    write_config(repo, {"stallTimeout": 1})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    done = fks("run", "./scripts/agent.sh -> ./scripts/agent.sh", cwd=repo, timeout=60)
    assert done.code == 1, done.output
    data = record(repo)
    assert reasons(data) == ["stalled"] and data["steps"][0]["reason"] == "stalled"
    assert data["steps"][1]["iterations"] == [], "the chain went on after a stalled step"
    assert "Incomplete: ./scripts/agent.sh stalled: no output for too long" in done.stdout


@pytest.mark.docker
def test_a_stalled_agent_in_the_sandbox_is_stopped_and_its_work_kept(tmp_path: Path) -> None:
    agent = STALLING_AGENT.replace(
        'echo "working on $n"',
        'echo "working on $n"; echo $n > "work-$n.txt"; git add -A; '
        'git -c user.name=a -c user.email=a@b commit -qm "work $n"',
    )
    repo = commit_scripts(init_repo(tmp_path / "repo"), {"agent.sh": agent})
    write_config(repo, {"stallTimeout": 2})
    (repo / ".gitignore").write_text("count\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    done = fks("run", "./scripts/agent.sh:3", "--sandbox", cwd=repo, timeout=300)
    assert done.code == 0, done.output
    assert reasons(record(repo)) == ["stalled", "marker"], done.output
    assert "Iteration 1 stalled: no output for 2s, so fks stopped it" in done.stdout
    assert (repo / "work-1.txt").read_text() == "1\n", "the stalled iteration's commit was lost"
