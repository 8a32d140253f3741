"""`fks forge` over a task's life, as a user drives it: concurrent runs, runs again after a
landing, blocked landings, land/retry/reset/show, statuses and locks. The agents are a fake
`claude` on PATH (tests/agents/fake_claude.py), so every stage runs through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import FKS, fks, git, init_repo

FAKE_CLAUDE = Path(__file__).parents[1] / "agents" / "fake_claude.py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(FAKE_CLAUDE)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_STATE": str(tmp_path / "fake")}


def create(repo: Path, title: str) -> str:
    done = fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
    assert done.code == 0, done.output
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"task {title}")
    return done.stdout.split()[-1]


def calls(env: dict[str, str]) -> Counter[tuple[str, str]]:
    path = Path(env["FAKE_STATE"]) / "calls.jsonl"
    if not path.exists():
        return Counter()
    lines = path.read_text().splitlines()
    return Counter((json.loads(line)["task"], json.loads(line)["stage"]) for line in lines)


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until `path` exists (the fake agent reached its hold), or `proc` ended without it."""
    deadline = time.monotonic() + 300  # only a bound on a hung test, not part of the outcome
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def start(repo: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [FKS, "forge", "run", *args, "--cwd", str(repo)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_concurrent_runs_process_each_task_once(repo: Path, env: dict[str, str]) -> None:
    first, second = create(repo, "first"), create(repo, "second")
    state = Path(env["FAKE_STATE"])
    # Run A takes `first` and is held in its review; run B, started then, sees `second` ready
    # and lands it; A, released, must not process `second` again.
    run_a = start(repo, {**env, "FAKE_HOLD": f"review:{first}"}, "--parallel", "1")
    wait_for(state / "held", run_a)
    run_b = fks("forge", "run", "--cwd", str(repo), env=env, timeout=300)
    assert run_b.code == 0, run_b.output
    (state / "go").write_text("")
    out, _ = run_a.communicate(timeout=300)
    assert run_a.returncode == 0, out
    assert calls(env) == Counter(
        {(t, s): 1 for t in (first, second) for s in ("analyze", "implement", "review")}
    )
    assert (repo / f"{first}.txt").exists() and (repo / f"{second}.txt").exists()
    status = json.loads(fks("forge", "status", "--json", "--cwd", str(repo)).stdout)
    assert {i["task"]: i["status"] for i in status} == {first: "completed", second: "completed"}
