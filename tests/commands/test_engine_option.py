"""`--engine` on `fks run` / `sandbox.engine` in the config: an engine a run cannot use (one
that does not answer, `swarm` on an engine that manages none, a swarm managed elsewhere) is one
line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

SWARM = "the local Docker engine is not a swarm manager"
ELSEWHERE = (
    "fks: sandbox engine 'swarm:tcp://127.0.0.1:1': a swarm managed by another engine "
    "is not supported yet; run fks on a manager of the swarm with engine 'swarm'\n"
)
UNREACHABLE = (
    "fks: Docker engine tcp://127.0.0.1:1 not reachable: Connection refused; check that it runs "
    "and listens there (e.g. 'docker -H URL info')\n"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


def assert_nothing_started(repo: Path) -> None:
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
    assert not (repo / ".forge" / "work").exists()
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ("tcp://127.0.0.1:1", UNREACHABLE),
        ("swarm:tcp://127.0.0.1:1", ELSEWHERE),
    ],
)
def test_an_engine_runs_cannot_use_is_one_line_before_anything_starts(
    repo: Path, engine: str, message: str
) -> None:
    done = fks("run", "--sandbox", "--engine", engine, "fake:2", cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr == message
    assert done.stdout == ""
    assert_nothing_started(repo)


@pytest.mark.docker  # asks the local engine whether it manages a swarm
@pytest.mark.xdist_group("swarm")  # not while the swarm's tests make it a manager
def test_swarm_needs_a_manager(repo: Path) -> None:
    write_config(repo, {"sandbox": {"network": "open"}})
    done = fks("run", "--sandbox", "--engine", "swarm", "fake:2", cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: sandbox engine 'swarm': {SWARM}; make one with 'docker swarm init' (and "
        "'docker swarm join' on the other machines)\n"
    )
    assert_nothing_started(repo)


def test_engine_from_the_config_is_used_also_on_a_dry_run(repo: Path) -> None:
    write_config(
        repo,
        {
            "sandbox": {"engine": "tcp://127.0.0.1:1"},
            "chains": {"c": {"steps": [{"agent": "fake"}]}},
        },
    )
    for extra in ([], ["--dry-run"]):
        done = fks("run", "--sandbox", "--chain", "c", *extra, cwd=repo)
        assert done.code == 2, done.output
        assert done.stderr == UNREACHABLE
    assert_nothing_started(repo)


def test_the_chains_engine_overrides_the_top_level_one(repo: Path) -> None:
    write_config(
        repo,
        {
            "sandbox": {"engine": "local"},
            "chains": {
                "c": {
                    "steps": [{"agent": "fake"}],
                    "sandbox": {"engine": "swarm:tcp://127.0.0.1:1"},
                }
            },
        },
    )
    done = fks("run", "--sandbox", "--chain", "c", "--dry-run", cwd=repo)
    assert done.code == 2 and done.stderr == ELSEWHERE


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sandbox", "--engine", "kube://x"], "fks: --engine: 'kube://x' is not one of: local"),
        (
            ["--sandbox", "--engine", "tcp://box"],
            "fks: --engine: 'tcp://box': give tcp://HOST:PORT",
        ),
        (["--engine", "local"], "fks: --engine only applies to --sandbox runs"),
    ],
)
def test_bad_engine_option_is_a_usage_error(repo: Path, args: list[str], message: str) -> None:
    done = fks("run", *args, "fake:2", cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
    assert_nothing_started(repo)


def test_forge_run_on_an_engine_it_cannot_use_stops_before_any_task_starts(repo: Path) -> None:
    created = fks("forge", "create", "something", "--description", "Make it", cwd=repo)
    assert created.code == 0, created.output
    write_config(repo, {"sandbox": {"engine": "swarm:tcp://127.0.0.1:1"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task and config")
    done = fks("forge", "run", "--sandbox", "--cwd", str(repo))
    assert done.code == 2, done.output
    assert done.stderr == ELSEWHERE
    assert not (repo / ".forge" / "work").exists()
    assert git(repo, "worktree", "list").count("\n") == 0
