"""`--engine` on `fks run` / `sandbox.engine` in the config: runs on another engine are refused
in one line before anything starts (remote workspaces do not exist yet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fks, git, init_repo, write_config

REFUSED = "running steps on another engine is not supported yet (remote workspaces are not)"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


def assert_nothing_started(repo: Path) -> None:
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
    assert not (repo / ".forge" / "work").exists()
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


@pytest.mark.parametrize(
    "engine", ["tcp://10.231.0.2:2375", "ssh://me@build-box", "context:build-box", "swarm"]
)
def test_run_on_another_engine_is_refused_in_one_line(repo: Path, engine: str) -> None:
    done = fks("run", "--sandbox", "--engine", engine, "fake:2", cwd=repo)
    assert done.code == 2, done.output
    hint = f" - 'fks image push --engine {engine}' already prepares the image there"
    assert done.stderr == (
        f"fks: sandbox engine {engine!r}: {REFUSED}; run with engine 'local'"
        f"{'' if engine == 'swarm' else hint}\n"
    )
    assert done.stdout == ""
    assert_nothing_started(repo)


def test_engine_from_the_config_is_refused_too_also_on_a_dry_run(repo: Path) -> None:
    write_config(
        repo,
        {
            "sandbox": {"engine": "tcp://10.231.0.2:2375"},
            "chains": {"c": {"steps": [{"agent": "fake"}]}},
        },
    )
    for extra in ([], ["--dry-run"]):
        done = fks("run", "--sandbox", "--chain", "c", *extra, cwd=repo)
        assert done.code == 2, done.output
        assert REFUSED in done.stderr and done.stderr.count("\n") == 1
    assert_nothing_started(repo)


def test_the_chains_engine_overrides_the_top_level_one(repo: Path) -> None:
    write_config(
        repo,
        {
            "sandbox": {"engine": "local"},
            "chains": {"c": {"steps": [{"agent": "fake"}], "sandbox": {"engine": "swarm"}}},
        },
    )
    done = fks("run", "--sandbox", "--chain", "c", "--dry-run", cwd=repo)
    assert done.code == 2 and "sandbox engine 'swarm'" in done.stderr


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


def test_forge_run_on_another_engine_is_refused_before_any_task_starts(repo: Path) -> None:
    created = fks("forge", "create", "something", "--description", "Make it", cwd=repo)
    assert created.code == 0, created.output
    write_config(repo, {"sandbox": {"engine": "ssh://me@build-box"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task and config")
    done = fks("forge", "run", "--sandbox", "--cwd", str(repo))
    assert done.code == 2, done.output
    assert REFUSED in done.stderr and done.stderr.count("\n") == 1
    assert not (repo / ".forge" / "work").exists()
    assert git(repo, "worktree", "list").count("\n") == 0
