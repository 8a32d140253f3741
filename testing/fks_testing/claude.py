"""Running `fks` with the real claude CLI against the fake Messages API, and looking at what it
left: the fake API key (never printed or written), run records, containers, commits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import FKS, git, init_repo, write_config

API_KEY = "sk-ant-api03-" + "e2eFakeKey7Qx2Lm9Pw4Rt8Zk3Vn6Bh1Jd5Sg0Yc"
assert len(API_KEY) == 13 + 40
RUN_TIMEOUT = 180.0


# --- running fks ---------------------------------------------------------------------------------


@dataclass
class FksRun:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def tail(self, lines: int = 60) -> str:
        out = "\n".join(self.stdout.splitlines()[-lines:])
        err = "\n".join(self.stderr.splitlines()[-lines:])
        return f"exit {self.code} after {self.seconds:.1f}s\n--- stdout (tail)\n{out}\n--- stderr (tail)\n{err}"

    @property
    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.stdout)
        except ValueError:
            pytest.fail("stdout is not the --json result:\n" + self.tail())
        assert isinstance(data, dict)
        return data


def run_fks(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT
) -> FksRun:
    """`fks …` with only `env`'s Anthropic/Claude settings (the caller's own are dropped).

    On timeout fks is sent SIGTERM (it stops its containers) before the test fails.
    """
    started = time.monotonic()
    process = subprocess.Popen(
        [FKS, *args],
        cwd=cwd,
        env=isolated_environ(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        run = FksRun(process.returncode, stdout, stderr, time.monotonic() - started)
        pytest.fail(f"fks {' '.join(args)} did not finish within {timeout:g}s\n{run.tail()}")
    run = FksRun(process.returncode, stdout, stderr, time.monotonic() - started)
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        assert API_KEY not in text, f"the API key was printed on {name}:\n{run.tail()}"
        assert API_KEY[-16:] not in text, f"part of the API key was printed on {name}"
    return run


def claude_env(fake: FakeAnthropic, **extra: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": f"http://host.docker.internal:{fake.port}",
        "ANTHROPIC_API_KEY": API_KEY,
        **extra,
    }


# --- looking at the results ----------------------------------------------------------------------


def run_record(repo: Path, run_id: str | None = None) -> dict[str, Any]:
    runs = repo / ".forge" / "runs"
    found = sorted(p for p in runs.iterdir() if (p / "run.json").is_file()) if runs.is_dir() else []
    assert found, f"no run record under {runs}"
    if run_id:
        data = json.loads((runs / run_id / "run.json").read_text())
    else:  # the newest by start time: ids only have one-second resolution
        data = max(
            (json.loads((p / "run.json").read_text()) for p in found), key=lambda r: r["started"]
        )
    assert isinstance(data, dict)
    return data


def containers(label: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return out.split()


@contextmanager
def forge_repo(path: Path, forge: dict[str, Any]) -> Iterator[Path]:
    """A repository at `path` whose committed config has `forge`'s settings; the containers
    fks left labelled with it are removed when the block ends."""
    repo = init_repo(path, {"README.md": "hello\n"})
    write_config(repo, {"forge": forge})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fks config")
    yield repo
    leftovers = containers(f"fks.repo={repo}")
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def subjects(repo: Path, ref: str = "main") -> list[str]:
    return git(repo, "log", "--format=%s", ref).splitlines()


def assert_no_secret(*roots: Path) -> None:
    """The key (or a long piece of it) is in no file under `<root>/.forge/`."""
    needles = (API_KEY.encode(), API_KEY[-16:].encode())
    for root in roots:
        forge = root / ".forge"
        for path in forge.rglob("*") if forge.is_dir() else ():
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert not any(n in data for n in needles), f"the API key is written in {path}"


def assert_claude_stats(it: dict[str, Any], *, subtype: str = "success") -> None:
    stats = it.get("claude")
    assert stats, f"iteration {it['number']} has no claude stats: {it}"
    assert stats["cost_usd"] and stats["cost_usd"] > 0, stats
    assert stats["input_tokens"] and stats["input_tokens"] > 0, stats
    assert stats["output_tokens"] and stats["output_tokens"] > 0, stats
    assert stats["turns"] and stats["turns"] >= 1, stats
    assert stats["session_id"], stats
    assert stats["subtype"] == subtype, stats


def bash(command: str, description: str = "run") -> dict[str, Any]:
    return {"tool": "Bash", "input": {"command": command, "description": description}}
