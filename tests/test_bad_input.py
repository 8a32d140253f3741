"""Input a user can get wrong ends in one line naming the cause, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks, one_line_error, write_config

LONG = "a" * 5000


def test_config_that_is_not_utf8(project: Path, cli: Any) -> None:
    (project / "forge").mkdir()
    (project / "forge" / "chains.json").write_bytes(b'{"chains": {"caf\xe9": {}}}')
    one_line_error(cli("validate"), "forge/chains.json: not UTF-8 text")


def test_deeply_nested_config(project: Path, cli: Any) -> None:
    (project / "forge").mkdir()
    (project / "forge" / "chains.json").write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(cli("validate"), "forge/chains.json: JSON is nested too deeply")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", f"./{LONG}"], "File name too long"),
        (["run", f".claude/agents/{LONG}"], "File name too long"),
        (["run", f"../{LONG}/.claude/agents/x"], "File name too long"),
        (["run", "fake", "--prompt-file", LONG], "--prompt-file: cannot use"),
        (["run", "fake", "--cwd", LONG], "--cwd: cannot use"),
        (["validate", "--cwd", LONG], "--cwd: cannot use"),
    ],
)
def test_paths_longer_than_the_os_allows(project: Path, args: list[str], fragment: str) -> None:
    result = fks(*args, cwd=project)
    one_line_error(result, fragment)
    assert len(result.stderr) < 400  # the path is shortened, not repeated in full


def test_config_referring_to_an_overlong_file(project: Path, cli: Any) -> None:
    write_config(project, {"chains": {"c": {"steps": [{"agent": "x", "promptFile": LONG}]}}})
    one_line_error(cli("validate"), "forge/chains.json: cannot use")
