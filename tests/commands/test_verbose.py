"""`fks run -v` shows each step's command, cwd and prompt before the step runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from fks_testing.helpers import fks


def test_verbose_shows_each_step_before_it_runs(project: Path) -> None:
    res = fks("run", "planner -> builder:2", "-v", "-p", "do the thing", "--", "--flag")
    assert res.code == 0, res.output
    lines = res.stdout.splitlines()
    for agent in ("planner", "builder"):
        program = shutil.which(agent)
        assert program is not None
        command = f"[fks]   command: {program} --flag 'do the thing'"
        assert command in lines, res.stdout
        started = next(
            i
            for i, line in enumerate(lines)
            if line.endswith(f": {agent}") or f": {agent} (" in line
        )
        shown = lines.index(command)
        assert started < shown, res.stdout
        assert lines[shown - 1] == "[fks]   prompt:  do the thing  [--prompt]"
        assert lines[shown + 1] == f"[fks]   cwd:     {project}"
    # Step 2's lines come after step 1 ran.
    assert res.stdout.index("fake agent iteration 1") < res.stdout.index(
        shutil.which("builder") or ""
    )


def test_without_verbose_the_command_is_not_shown(project: Path) -> None:
    res = fks("run", "planner", "-p", "x")
    assert res.code == 0, res.output
    assert "command:" not in res.stdout
