"""The one backend factory: local processes unless there are sandbox settings, and the Docker
backend (with the docker package) loaded only when a sandbox is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fks_testing.helpers import init_repo

from sandbox_runner.backends.factory import make_backend
from sandbox_runner.backends.local import LocalBackend
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.sandbox import SandboxSettings


def test_without_sandbox_settings_steps_run_as_local_processes(tmp_path: Path) -> None:
    backend = make_backend(cwd=tmp_path, agents={}, sandbox=None)
    assert isinstance(backend, LocalBackend)
    assert backend.base_branch is None
    assert backend.resolve(Step(agent="echo")).program.endswith("echo")


def test_with_sandbox_settings_the_docker_backend_is_built(tmp_path: Path) -> None:
    from sandbox_runner.backends.docker.backend import SandboxBackend

    repo = init_repo(tmp_path / "repo")
    backend = make_backend(cwd=repo, agents={}, sandbox=SandboxSettings(), base=None)
    assert isinstance(backend, SandboxBackend)
    assert backend.base_branch == "main"


def test_building_a_local_backend_loads_no_docker_code(tmp_path: Path) -> None:
    probe = (
        "import sys, pathlib; from sandbox_runner.backends.factory import make_backend; "
        f"make_backend(cwd=pathlib.Path({str(tmp_path)!r}), agents={{}}, sandbox=None); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'docker' "
        "or m.startswith('sandbox_runner.backends.docker')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
