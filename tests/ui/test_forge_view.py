"""`fks forge run`'s live view: a row per task in flight; only stage changes and results scroll."""

from __future__ import annotations

import io
import subprocess
import sys

from rich.console import Console

from sandbox_runner.forge.scheduler import Worker
from sandbox_runner.ui.forge_view import LiveForgeView


def test_one_row_per_task_in_flight_and_only_milestones_in_the_scrollback() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, height=20, highlight=False)
    view = LiveForgeView(out, console=console)
    sleeper = [sys.executable, "-c", "pass"]
    workers = [
        Worker("TASK-aaaaaa", subprocess.Popen(sleeper), stage="Analyze", last="reading"),
        Worker("TASK-bbbbbb", subprocess.Popen(sleeper), stage="Review", last="\x1b[31mred\x1b[0m"),
    ]
    try:
        view.tick(workers)
        shot = Console(file=io.StringIO(), width=100, record=True, color_system=None)
        shot.print(view.render())
        rows = [row.rstrip() for row in shot.export_text().splitlines()]
        assert len(rows) == 2
        assert rows[0].split()[:2] == ["TASK-aaaaaa", "Analyze"] and rows[0].endswith("reading")
        assert rows[1].split()[:2] == ["TASK-bbbbbb", "Review"] and rows[1].endswith("red")
        view.line("TASK-aaaaaa", "some agent chatter")
        view.line("TASK-aaaaaa", "[fks] Stage: Implement")
    finally:
        view.close()
        for worker in workers:
            worker.proc.wait()
    text = out.getvalue()
    assert "[TASK-aaaaaa] [fks] Stage: Implement" in text
    assert "some agent chatter" not in text
