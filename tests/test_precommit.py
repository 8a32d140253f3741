"""The pre-commit hooks run the same lint and type checks as the test command (scripts/test)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHECKERS = ("ruff", "mypy")


def _test_command_checks() -> list[list[str]]:
    """The checker commands scripts/test runs, in order."""
    commands = []
    script = (ROOT / "scripts" / "test").read_text().replace("\\\n", " ")  # continued lines
    for line in script.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] in CHECKERS:
            commands.append(words)
    return commands


def _hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_pre_commit_hooks_run_the_checks_of_the_test_command() -> None:
    hooks = _hooks()
    assert [shlex.split(hook["entry"]) for hook in hooks] == _test_command_checks()
    assert len(hooks) == 3


def test_pre_commit_hooks_need_no_network_and_check_the_whole_project() -> None:
    """Local hooks with the tools already installed, each run on the whole tree as scripts/test
    does (mypy takes its files from pyproject.toml, not from the staged ones)."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    for hook in _hooks():
        assert hook["language"] == "system"
        assert hook["pass_filenames"] is False
        assert hook["always_run"] is True
