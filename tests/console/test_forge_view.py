"""`fks forge run`'s live view: a row per task in flight; only stage changes and results scroll."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import FKS, fks, git, init_repo
from rich.console import Console

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.forge_view import LiveForgeView, PlainForgeView, forge_view
from sandbox_runner.forge.scheduler import Worker


def test_off_a_terminal_the_view_is_plain_lines_with_escapes_stripped() -> None:
    out = io.StringIO()
    view = forge_view(out, total=1, spent=lambda: 0.0)
    assert isinstance(view, PlainForgeView) and not isinstance(view, LiveForgeView)
    view.note("Forge \x1b]0;title\x07S-1")
    view.line("T-1", "\x1b[2Jcol\tumn \u202egpj.sh")
    view.close()
    assert out.getvalue().splitlines() == ["[fks] Forge S-1", "[T-1] col\tumn <U+202E>gpj.sh"]


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
    assert overall.startswith("1/5 tasks done, 1 in flight, 1 landed · $1.25 · ")
    assert len(rows) == 1 and rows[0].startswith("TASK-77aa01 Review")
    assert len(both) == 2 and all(len(row) <= 80 for row in both)
    assert both[0].startswith("TASK-3f9a2c1b Implement (attempt 2) 1:02:05 Reading")
    assert both[1].startswith("TASK-77aa01   Review                0:00    Reading")
    assert both[0].endswith("…")


def _team(request: Request) -> Any:
    """Analyze, implement (one file, committed) and approve."""
    if any(r for r in request.tool_results):
        return [{"text": "Done."}]
    system = request.system_text
    if "You analyze one task" in system:
        plan = {"complexity": "low", "plan": "Write it.", "sufficient": True}
        return [{"tool": "StructuredOutput", "input": plan}]
    if "You implement one task" in system:
        command = "echo hi > hi.txt && git add hi.txt && git commit -qm 'say hi'"
        return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
    if "You review the implementation of one task" in system:
        return [{"tool": "StructuredOutput", "input": {"approved": True}}]
    return [{"text": f"unexpected: {request.prompt[:100]}"}]


@pytest.mark.claude
def test_fks_forge_run_on_an_80_column_terminal(tmp_path: Path) -> None:
    """The live view as a user sees it: the real `fks forge run` on a pty 80 columns wide."""
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    task = fks("forge", "create", "Say hi", cwd=repo).stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    seen = threading.Event()  # the analysis waits until the test has seen the view

    def team(request: Request) -> Any:
        if "You analyze one task" in request.system_text and not request.tool_results:
            seen.wait(timeout=120)
        return _team(request)

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 80, 0, 0))
    with FakeAnthropic(responder=team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm"
        proc = subprocess.Popen(
            [FKS, "forge", "run"], cwd=repo, env=env, stdin=follower, stdout=follower,
            stderr=follower,
        )  # fmt: skip
        os.close(follower)
        text = ""
        try:
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                text += strip_escapes(chunk.decode("utf-8", "replace"), keep="\n\r")
                if not seen.is_set() and re.search(rf"{task} +Analyze +\d+:\d\d", text):
                    seen.set()
            assert proc.wait(timeout=300) == 0, text[-2000:]
        finally:
            seen.set()
            if proc.poll() is None:
                proc.kill()
            os.close(leader)
    lines = re.split(r"[\r\n]+", text)
    row = next(line for line in lines if re.search(rf"{task} +Analyze +\d+:\d\d", line))
    assert len(row.rstrip()) <= 80
    assert any(line.startswith("0/1 task done, 1 in flight, 0 landed · $") for line in lines)
    assert f"[{task}] [fks] Landed on 'main'" in text
