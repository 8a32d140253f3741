"""Running `fks run --sandbox` in a test repository and looking at what it left: its
containers, workspace volumes, branches and run records."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fks_testing.helpers import (
    FKS,
    Result,
    eventually_none,
    fks,
    git,
    write_config,
)
from sandbox_runner.labels import LABEL_REPO, LABEL_RUN

COMMIT_AGENT = """#!/bin/sh
# Commits one file per iteration; prints the marker on iteration ${MARK_AT:-2}.
n=$(ls work-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "iteration $n as $(id -u):$(id -g) in $(pwd)"
echo "work $n" > work-$n.txt
git add work-$n.txt && git commit -qm "agent: work $n"
if [ "$n" -ge "${MARK_AT:-2}" ]; then echo FORKHESTRA_COMPLETE; fi
"""


RUNTIMES = ("runc", "runsc")
"""The runtimes the sandbox's attacks are run under: the engine's default, and gVisor
(registered by scripts/ensure-runsc)."""


def runtime_args(runtime: str) -> tuple[str, ...]:
    """`fks run`'s option for `runtime` (none for the engine's default, runc)."""
    return () if runtime == "runc" else ("--runtime", runtime)


def containers(run_id: str | None = None) -> list[str]:
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def of_repo(kind: str, repo: Path) -> list[str]:
    """Containers (`ps`) or volumes (`volume`) fks made for `repo`."""
    argv = ["docker", "ps", "-aq"] if kind == "ps" else ["docker", "volume", "ls", "-q"]
    done = subprocess.run(
        [*argv, "--filter", f"label={LABEL_REPO}={repo}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def volumes(run_id: str | None = None) -> list[str]:
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    out = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def record(repo: Path) -> dict[str, Any]:
    found = [json.loads((d / "run.json").read_text()) for d in (repo / ".forge" / "runs").iterdir()]
    return max(found, key=lambda r: r["started"])


def configure(repo: Path, data: dict[str, Any]) -> None:
    """Commit a forge/chains.json; MARK_AT always passes through to the container."""
    sandbox_cfg = data.setdefault("sandbox", {})
    sandbox_cfg.setdefault("env", []).append("MARK_AT")
    write_config(repo, data)
    git(repo, "add", "forge")
    git(repo, "commit", "-qm", "config")


def add_script(repo: Path, name: str, body: str, commit: bool = True) -> None:
    path = repo / "scripts" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    if commit:
        git(repo, "add", str(path))
        git(repo, "commit", "-qm", f"add {name}")


def sandbox(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> Result:
    return fks("run", *args, "--sandbox", env=env, timeout=timeout)


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def run_with_user_commit(
    repo: Path,
    flags: Path,
    dsl: str,
    edit: dict[str, str],
    dirty: dict[str, str] | None = None,
) -> tuple[int, str, str, str]:
    """Start `fks run DSL --sandbox`; once its container runs, commit `edit` on main as the user
    would (and write `dirty`, uncommitted), then let the agent finish (it waits for
    `flags/go`). Returns (code, out, err, user tip)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_runner", "run", dsl, "--sandbox"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not of_repo("ps", repo) and time.monotonic() < deadline:
            time.sleep(0.1)
        for name, content in edit.items():
            (repo / name).write_text(content)
        git(repo, "add", *edit)
        git(repo, "commit", "-qm", "the user's own work during the run")
        user_tip = git(repo, "rev-parse", "main")
        for name, content in (dirty or {}).items():
            (repo / name).write_text(content)
        (flags / "go").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, user_tip


def waiting_agent(flags: Path, work: str) -> str:
    return f"#!/bin/sh\n{work}\nwhile [ ! -e {flags}/go ]; do sleep 0.1; done\necho FORKHESTRA_COMPLETE\n"


def interrupt_once_logged(repo: Path, dsl: str, text: str) -> tuple[int, str, str, float]:
    """`fks run DSL --sandbox`, Ctrl-C once step 1's first log shows `text`: (exit code,
    stdout, stderr, seconds from the signal to the exit)."""
    proc = subprocess.Popen(
        [FKS, "run", dsl, "--sandbox"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        runs = repo / ".forge" / "runs"
        while not any(text in p.read_text() for p in runs.glob("*/01-*/001.log")):
            assert time.monotonic() < deadline, f"the agent never printed {text!r}"
            time.sleep(0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=110)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, time.monotonic() - started


def nothing_started(repo: Path) -> None:
    """No run record, no step branch, no workspace volume, no container."""
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
    assert branches(repo) == ["main"]
    assert of_repo("ps", repo) == []
    eventually_none(lambda: of_repo("volume", repo), "the workspace")


def kept_name(repo: Path) -> str:
    """The name of the repository's kept workspace volume, as its state names it."""
    from sandbox_runner.backends.docker.workspace.kept import kept_volume_name

    name = kept_volume_name(repo)
    assert name is not None, f"{repo} has no kept workspace"
    return name
