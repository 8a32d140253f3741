"""The bundled example (examples/hello) and the README's `./scripts/demo`, as a user runs them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from fks_testing.helpers import FKS, git, init_repo

REPO = Path(__file__).resolve().parent.parent


def test_hello_example_chain_end_to_end(tmp_path: Path) -> None:
    project = tmp_path / "hello"
    shutil.copytree(REPO / "examples" / "hello", project)
    init_repo(project, {})
    env = {**os.environ, "PATH": f"{Path(FKS).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [FKS, "run", "--chain", "demo"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[fks] Chain complete (2/2 steps)" in done.stdout
    assert (project / "greeting.txt").read_text() == "Hello from fks\n"
    assert (project / "farewell.txt").read_text() == "Goodbye from fks\n"
    tasks = json.loads(
        subprocess.run(
            ["forge-tasks", "list", "--json"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert sorted((t["title"], t["status"]) for t in tasks) == [
        ("Write farewell.txt", "Done"),
        ("Write greeting.txt", "Done"),
    ]
    assert git(project, "status", "--porcelain") == ""


def test_demo_script(tmp_path: Path) -> None:
    """`./scripts/demo` uses the repository's .venv; point it at the fks under test."""
    venv_bin = Path(sys.executable).parent
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", checkout / "examples")
    shutil.copytree(REPO / "scripts", checkout / "scripts")
    (checkout / ".venv").mkdir()
    (checkout / ".venv" / "bin").symlink_to(venv_bin)
    done = subprocess.run(
        [str(checkout / "scripts" / "demo")],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[fks] Chain complete (2/2 steps)" in done.stdout
    assert "complete  2/2" in done.stdout  # fks runs
    assert "demo: done." in done.stdout
    # The closing hint works as printed, without the venv on PATH.
    hint = next(line for line in done.stdout.splitlines() if line.startswith("demo: done."))
    command = shlex.split(hint.split("with: ", 1)[1])
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(venv_bin))
    shown = subprocess.run(
        command, env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "status:     complete" in shown.stdout
