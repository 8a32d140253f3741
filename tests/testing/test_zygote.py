"""The tests' `fks` (testing/fks_testing/zygote.py): a fork of a process that imported fks, with
what a new process would give a user: exit code, the two outputs apart, the working directory
and environment asked for, a timeout that kills it; and a new process where a fork would differ."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fks_testing import zygote as zygote_module
from fks_testing.helpers import FKS, fks, init_repo


def test_a_command_is_a_fork_of_the_zygote_with_its_cwd_env_and_outputs(tmp_path: Path) -> None:
    started = zygote_module.zygote(FKS)
    assert started is not None
    repo = init_repo(tmp_path / "repo")
    res = fks("run", "no-such-agent", cwd=repo, env={"XDG_STATE_HOME": str(tmp_path / "s")})
    plain = subprocess.run(
        [FKS, "run", "no-such-agent"],
        cwd=repo,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "s")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (res.code, res.stdout, res.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert res.code == 2 and res.stderr.startswith("fks: ")
    assert zygote_module.zygote(FKS) is started  # the same zygote served it
    assert started.process.poll() is None


def test_the_version_and_exit_code_zero(tmp_path: Path) -> None:
    res = fks("--version", cwd=tmp_path)
    assert res.code == 0 and res.stdout.startswith("fks ") and res.stderr == ""


def test_an_environment_read_at_import_gets_a_new_process(tmp_path: Path) -> None:
    started = zygote_module.zygote(FKS)
    assert started is not None
    env = {**os.environ, "FKS_AGENT_IMAGE": "fks-test-elsewhere:1"}
    assert not started.serves(env)
    assert started.serves(dict(os.environ))


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    started = zygote_module.zygote(FKS)
    assert started is not None
    repo = init_repo(tmp_path / "repo")
    agent = repo / "sleepy.sh"
    agent.write_text("#!/bin/sh\nsleep 60\n")
    agent.chmod(0o755)
    with pytest.raises(subprocess.TimeoutExpired):
        fks("run", "./sleepy.sh:1", cwd=repo, timeout=3)
    assert started.process.poll() is None  # the zygote goes on serving
    assert fks("--version", cwd=tmp_path).code == 0
