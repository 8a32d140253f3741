"""Where a run's steps run (`backends/docker/targets.py`): what a remote engine or a swarm
cannot give a step is refused in one line before fks reaches for the engine at all (so an
engine that does not answer still gets the right reason), and nothing is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

NOWHERE = "tcp://127.0.0.1:1"  # no engine answers there: a refusal must come before connecting
API_KEY = "sk-ant-api03-test"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n", "agent.sh": "#!/bin/sh\n"})
    (repo / "agent.sh").chmod(0o755)
    git(repo, "add", "agent.sh")
    git(repo, "commit", "-qm", "agent executable")
    return repo


def refused(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = fks("run", "--sandbox", *args, cwd=repo, env=env)
    assert done.code == 2, done.output
    assert "Traceback" not in done.output
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    return done.stderr


def test_a_remote_engine_refuses_this_machines_paths_without_being_reached(
    repo: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    write_config(repo, {"sandbox": {"mounts": [str(shared)]}})
    assert refused(repo, "--engine", NOWHERE, "./agent.sh:1") == (
        f"fks: sandbox.mounts: engine {NOWHERE} cannot see this machine's paths ({shared}); "
        "remove sandbox.mounts or run on the local engine\n"
    )


def test_a_remote_engine_refuses_a_claude_config_file_of_this_machine(repo: Path) -> None:
    (repo / "claude-settings.json").write_text("{}\n")
    write_config(
        repo, {"agents": {"w": {"systemPromptText": "hi", "settings": "claude-settings.json"}}}
    )
    stderr = refused(repo, "--engine", NOWHERE, "w:1", env={"ANTHROPIC_API_KEY": API_KEY})
    assert stderr.startswith("fks: agent 'w': its Claude config file "), stderr
    assert stderr.endswith(
        f"claude-settings.json would be mounted from this machine, which engine {NOWHERE} "
        "cannot see; run it on the local engine\n"
    ), stderr


def test_a_remote_engine_refuses_a_model_api_on_this_machine(repo: Path) -> None:
    write_config(repo, {"agents": {"w": {"systemPromptText": "hi"}}})
    env = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    assert refused(repo, "--engine", NOWHERE, "w:1", env=env) == (
        "fks: ANTHROPIC_BASE_URL http://127.0.0.1:9 is on this machine, which containers on "
        f"engine {NOWHERE} cannot reach; give an address that engine reaches\n"
    )


def test_a_swarm_refuses_a_runtime_before_asking_docker(repo: Path) -> None:
    """A swarm service cannot choose its containers' runtime: `--runtime` is refused rather
    than silently run on the nodes' default."""
    write_config(repo, {"sandbox": {"network": "open"}})
    env = {"DOCKER_HOST": NOWHERE}
    assert refused(repo, "--engine", "swarm", "--runtime", "runsc", "./agent.sh:1", env=env) == (
        "fks: sandbox.runtime: a swarm's services run under each node's default runtime, not "
        "'runsc'; remove sandbox.runtime (or make it the nodes' default-runtime), or run on a "
        "single engine (tcp://, ssh://)\n"
    )
