"""A sandboxed run's session: what it looks for on the engine before its first step."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock

from fks_testing.helpers import init_repo

from sandbox_runner.backends.docker.backend import SandboxBackend
from sandbox_runner.plan.sandbox import SandboxSettings


def test_only_a_resumed_run_looks_for_what_its_killed_process_left(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    backend = SandboxBackend(cwd=repo, agents={}, settings=SandboxSettings(), base="main")
    client = backend._client = MagicMock()
    with backend.session("20260101-000000-abcd", MagicMock()):
        pass
    client.containers.list.assert_not_called()
    client.volumes.list.assert_not_called()
    with backend.session("20260101-000000-abcd", MagicMock(), resumed=True):
        pass
    assert client.containers.list.call_count == 1
    assert client.volumes.list.call_count == 1
