"""Helpers shared by the tests: configs, git repositories, running the `fks` console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fks_testing.zygote import zygote

# The installed console script, as a user runs it.
FKS = shutil.which("fks") or str(Path(sys.executable).parent / "fks")
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test User",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test User",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    """What the fake agent recorded, one entry per process."""
    path = tmp_path / "state" / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_config(project: Path, data: dict[str, Any]) -> Path:
    path = project / "forge" / "chains.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def fks(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> Result:
    """Run the real `fks` console script in a process of its own: a fork of this test process's
    zygote, which has imported fks already (`zygote.py`), or a new process."""
    full_env = {**os.environ, **(env or {})}
    started = zygote(FKS)
    if started is not None and started.serves(full_env):
        return Result(*started.run(args, cwd, full_env, timeout))
    done = subprocess.run(
        [FKS, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_IDENTITY},
    )
    return done.stdout.strip()


def init_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    for name, content in (files or {"README.md": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def commit_scripts(repo: Path, scripts: dict[str, str], folder: str = "scripts") -> Path:
    """Write executable agent scripts into `repo/folder` and commit them."""
    for name, body in scripts.items():
        script = repo / folder / name
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(body)
        script.chmod(0o755)
    git(repo, "add", folder)
    git(repo, "commit", "-qm", f"add {', '.join(scripts)}")
    return repo


def agent_lines(output: str) -> list[str]:
    """The lines an agent wrote, as fks's plain output shows them (without their prefix)."""
    from sandbox_runner.console.output import AGENT_PREFIX

    return [
        line[len(AGENT_PREFIX) :] for line in output.splitlines() if line.startswith(AGENT_PREFIX)
    ]


def eventually_none(probe: Callable[[], list[str]], what: str, timeout: float = 120) -> None:
    """Wait until `probe()` lists nothing: a finished run's workspace volumes are removed in
    the background once fks has returned."""
    deadline = time.monotonic() + timeout
    while left := probe():
        assert time.monotonic() < deadline, f"{what} still there after {timeout:g}s: {left}"
        time.sleep(0.1)


def one_line_error(result: Result, fragment: str) -> None:
    """`result` is a usage or config error: exit 2, one line on stderr saying `fragment`."""
    assert result.code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fks: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
