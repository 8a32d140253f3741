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
        overall, *rows = [row.rstrip() for row in shot.export_text().splitlines()]
        assert overall.startswith("0/2 tasks done, 2 in flight, 0 landed · $0.0000 · ")
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


def test_at_80_columns_id_stage_and_time_are_whole_with_an_overall_line() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, height=20, highlight=False)
    costs = [0.5]
    view = LiveForgeView(out, console=console, total=5, spent=lambda: costs[-1])
    sleeper = [sys.executable, "-c", "pass"]
    chatter = "Reading sandbox_runner/commands/forge.py and the tests around it " * 4
    first = Worker("TASK-3f9a2c1b", subprocess.Popen(sleeper), stage="Implement (attempt 2)")
    second = Worker("TASK-77aa01", subprocess.Popen(sleeper), stage="Review", last=chatter)
    first.last, first.started = chatter, first.started - 3725  # 1:02:05 ago
    try:
        view.tick([first, second])
        view.line("TASK-0001", "[fks] Landed on 'main' (abc), $0.5000")
        costs.append(1.25)
        view.tick([second])  # the first task finished: what it cost is read at once
        shot = Console(file=io.StringIO(), width=80, record=True, color_system=None)
        shot.print(view.render())
        overall, *rows = [row.rstrip() for row in shot.export_text().splitlines()]
        view.tick([first, second])  # drawn at 80 columns with both tasks in flight
        shot = Console(file=io.StringIO(), width=80, record=True, color_system=None)
        shot.print(view.render())
        _, *both = [row.rstrip() for row in shot.export_text().splitlines()]
    finally:
        view.close()
        first.proc.wait()
        second.proc.wait()
    assert overall.startswith("1/5 tasks done, 1 in flight, 1 landed · $1.2500 · ")
    assert len(rows) == 1 and rows[0].startswith("TASK-77aa01 Review")
    assert len(both) == 2 and all(len(row) <= 80 for row in both)
    assert both[0].startswith("TASK-3f9a2c1b Implement (attempt 2) 1:02:05 Reading")
    assert both[1].startswith("TASK-77aa01   Review                0:00    Reading")
    assert both[0].endswith("…")
