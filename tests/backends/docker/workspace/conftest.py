"""The attack tests' shared fixture: the host as it was before the attack."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.attacks import Host
from fks_testing.helpers import git


@pytest.fixture
def host(repo: Path, tmp_path: Path) -> Host:
    git(repo, "tag", "-a", "-m", "release", "v1")
    return Host(repo, tmp_path)
