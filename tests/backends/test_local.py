"""Agents as host processes (no --sandbox): what fks refuses before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner.plan.prompts import MARKER


@pytest.mark.claude
@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for root")
def test_a_local_claude_step_as_root_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    repo = init_repo(tmp_path / "repo")
    write_config(repo, {"agents": {"worker": {"systemPromptText": "You work.", "maxTurns": 3}}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    head = git(repo, "rev-parse", "HEAD")
    with FakeAnthropic([[[{"text": f"Done.\n{MARKER}"}]]] * 4) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        del env["IS_SANDBOX"]
        tasks = fks("forge", "create", "say hi", cwd=repo, env=env)
        assert tasks.code == 0, tasks.output
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "task")
        head = git(repo, "rev-parse", "HEAD")
        commands = (("run", "worker:3", "--prompt", "Go."), ("run", "worker"), ("forge", "run"))
        for args in commands:
            done = fks(*args, cwd=repo, env=env)
            assert done.code == 2, (args, done.output)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("fks: "), (args, done.output)
            assert "root" in lines[0] and "--sandbox" in lines[0], lines[0]
            assert "IS_SANDBOX=1" in lines[0], lines[0]
            assert done.stdout.strip() == "", (args, done.output)
        assert fake.requests == [], "claude was started"
    runs = repo / ".forge" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
    assert not (repo / ".forge" / "work").exists() or not any((repo / ".forge" / "work").iterdir())
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert git(repo, "status", "--porcelain") == ""
