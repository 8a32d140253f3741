"""The live view: the reporter driven directly, `fks run` in a real terminal (tmux), and in a pipe."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from fks_testing.helpers import FKS, fks
from rich.console import Console

from sandbox_runner.agentclis.events import AssistantText, Result, ToolCall
from sandbox_runner.console.live import LiveReporter
from sandbox_runner.console.output import PlainReporter
from sandbox_runner.results.ended import IterationResult, StepOutcome
from sandbox_runner.steps.reporter import Reporter

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Z]|\x1b[=>]")
BOX = set("╭╮╰╯│─")


def plain_text(output: str) -> str:
    return ANSI.sub("", output).replace("\r", "")


def screen_of(output: str) -> list[str]:
    """The rows a terminal shows after `output`: enough of one for what rich writes."""
    rows, row, col = [""], 0, 0
    for token in re.finditer(r"\x1b\[([0-?]*)[ -/]*([@-~])|\r|\n|[^\x1b\r\n]+", output):
        text = token.group(0)
        if text == "\r":
            col = 0
        elif text == "\n":
            row, col = row + 1, 0
            rows.extend([""] * (row + 1 - len(rows)))
        elif token.group(2) == "A":
            row = max(0, row - int(token.group(1) or 1))
        elif token.group(2) == "K" and token.group(1) == "2":
            rows[row] = ""
        elif not text.startswith("\x1b"):
            line = rows[row].ljust(col)
            rows[row] = line[:col] + text + line[col + len(text) :]
            col += len(text)
    return [r.rstrip() for r in rows if r.strip()]


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(
        file=buffer, force_terminal=True, width=width, height=40, highlight=False
    ), buffer


def panel_text(reporter: LiveReporter, width: int = 60) -> str:
    shot = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    shot.print(reporter.render())
    return shot.export_text()


def iteration(
    number: int, *, complete: bool, reason: str = "no_marker", code: int = 0
) -> IterationResult:
    moment = datetime(2026, 1, 1)
    return IterationResult(number, complete, complete, reason, code, moment, moment)


def live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]


def assert_stopped() -> None:
    for thread in live_threads():
        thread.join(timeout=30)
    assert not live_threads(), "the panel is still being redrawn"


@pytest.fixture
def live() -> Iterator[tuple[LiveReporter, io.StringIO]]:
    console, buffer = terminal()
    reporter = LiveReporter(console=console)
    try:
        yield reporter, buffer
    finally:
        reporter.close()


def drive(reporter: Reporter) -> None:
    """Two steps: a loop that completes on its 2nd iteration, then a one-off that fails."""
    reporter.info("Run 20260101-000000-abcd")
    reporter.step_started(1, 2, "planner", 3, True)
    for n in (1, 2):
        reporter.iteration_started(n, 3, True)
        reporter.output("stdout", f"planner says {n}\n".encode())
        reporter.iteration_ended(
            iteration(n, complete=n == 2, reason="marker" if n == 2 else "no_marker")
        )
    reporter.step_ended(
        "planner",
        StepOutcome(
            True, "marker", (iteration(1, complete=False), iteration(2, complete=True)), maximum=3
        ),
        True,
    )
    reporter.warn("something odd")
    reporter.step_started(2, 2, "builder", 1, False)
    reporter.iteration_started(1, 1, False)
    reporter.output("stderr", b"builder: cannot find the tests\n")
    failed = iteration(1, complete=False, reason="timeout", code=None)  # type: ignore[arg-type]
    reporter.iteration_ended(failed)
    reporter.step_ended("builder", StepOutcome(False, "timeout", (failed,), maximum=1), False)
    reporter.chain_ended(False, 1, 2, cost=None)
    reporter.close()


# --- the reporter on its own ------------------------------------------------------------------


def test_permanent_lines_say_what_the_plain_reporter_says() -> None:
    plain_out = io.StringIO()
    drive(PlainReporter(out=plain_out, agent_out=io.BytesIO()))
    expected = [
        line
        for line in plain_out.getvalue().splitlines()
        if line.startswith("[fks]") and "Iteration" not in line
    ]
    assert "[fks] Complete after 2 iterations" in expected  # the comparison below is not vacuous
    assert "[fks] Incomplete: builder timed out" in expected

    console, buffer = terminal(width=120)
    drive(LiveReporter(console=console))
    shown = screen_of(buffer.getvalue())
    # What the failing step printed last stays on screen after the panel is gone.
    failed_at = expected.index("[fks] Incomplete: builder timed out") + 1
    assert shown == [
        *expected[:failed_at],
        "    builder: cannot find the tests",
        *expected[failed_at:],
    ]
    assert_stopped()


def test_panel_shows_step_iteration_and_last_lines(live: tuple[LiveReporter, io.StringIO]) -> None:
    reporter, _ = live
    reporter.step_started(2, 3, "builder", 5, True)
    reporter.iteration_started(4, 5, True)
    for n in range(20):
        reporter.output("stdout", f"line {n:02d}\n".encode())
    text = panel_text(reporter)
    assert (
        "Step 2/3" in text and "builder" in text and "iteration 4/5" in text and "run 0:0" in text
    )
    assert "$" not in text  # no cost yet
    shown = re.findall(r"line \d\d", text)
    assert shown == [f"line {n:02d}" for n in range(12, 20)]


def test_panel_reassembles_cleans_and_truncates_output(
    live: tuple[LiveReporter, io.StringIO],
) -> None:
    reporter, _ = live
    reporter.step_started(1, 1, "noisy", 1, False)
    reporter.iteration_started(1, 1, False)
    for chunk in (
        b"hel",
        b"lo \x1b[31mred\x1b[0m wor",
        b"ld\r\n",
        b"\x1b]0;title\x07tab\there\n\n\n",
        b"progress 10%\rprogress 90%",
    ):
        reporter.output("stdout", chunk)
    reporter.output("stdout", b"z" * 500 + b"\n")
    reporter.output("stderr", "caf\u00e9 \x07bell\n".encode())
    text = panel_text(reporter, width=60)
    assert "once" in text
    assert "hello red world" in text
    assert "tab here" in text
    assert "progress 90%" in text and "progress 10%" not in text
    assert "café bell" in text
    assert "\x1b" not in text and "[31m" not in text and "title" not in text
    long_row = next(row for row in text.splitlines() if "zzz" in row)
    assert len(long_row) <= 60 and "…" in long_row
    assert all(len(row) <= 60 for row in text.splitlines())


def test_claude_progress_and_cost(live: tuple[LiveReporter, io.StringIO]) -> None:
    reporter, buffer = live
    reporter.step_started(1, 1, "claude", 3, True)
    reporter.iteration_started(1, 3, True)
    result = Result("success", False, "ok", 4, 12_300, 0.0125, 10, 20, "s", None)
    reporter.events(
        [
            ToolCall("Bash", "Bash: make test"),
            AssistantText("Tests pass.\nNow the docs.\nAnd more.\n"),
            result,
        ]
    )
    reporter.events([ToolCall("Edit", "Edit: src/app.py"), result])
    text = panel_text(reporter, width=80)
    assert "› Bash: make test" in text and "› Edit: src/app.py" in text
    assert "Tests pass." in text and "Now the docs. …" in text and "And more." not in text
    assert "$0.0250" in text
    assert "[fks] Iteration 1/3: result: success, 4 turns, 12.3s, $0.0125" in plain_text(
        buffer.getvalue()
    )


def test_close_gives_the_terminal_back_and_can_be_called_twice() -> None:
    console, buffer = terminal()
    reporter = LiveReporter(console=console)
    try:
        reporter.step_started(1, 1, "fake", 3, True)
        reporter.iteration_started(1, 3, True)
        assert live_threads(), "the panel should be live while a step runs"
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        reporter.close()
    finally:
        reporter.close()
    raw = buffer.getvalue()
    assert raw.rindex("\x1b[?25h") > raw.rindex("\x1b[?25l"), "cursor left hidden"
    assert screen_of(raw) == ["[fks] Starting: fake (max 3 iterations)"]
    assert_stopped()
    reporter.info("after the run")  # e.g. the summary printed after close()
    after = buffer.getvalue()[len(raw) :]
    assert plain_text(after) == "[fks] after the run\n" and "\x1b[2K" not in after


def test_a_flood_of_output_is_cheap_and_bounded(live: tuple[LiveReporter, io.StringIO]) -> None:
    reporter, buffer = live
    reporter.step_started(1, 1, "noisy", 1, True)
    reporter.iteration_started(1, 1, True)
    chunk = (b"x" * 79 + b"\n") * 819  # 64 KB of lines
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(1600):  # 100 MB
        reporter.output("stdout", chunk)
    elapsed = time.perf_counter() - started
    # Its own CPU time, which other processes on a busy machine do not stretch.
    cpu = time.process_time() - cpu_started
    assert cpu < 5, f"100 MB of output took {cpu:.1f}s of CPU"
    # Drawn a few times a second, not once per chunk (one frame is about 1 KB).
    assert len(buffer.getvalue()) < 2_000 * (elapsed * 4 + 4)

    one_line = b"y" * (1 << 20)  # a 100 MB line without a newline
    tracemalloc.start()
    try:
        for _ in range(100):
            reporter.output("stdout", one_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
    assert "yyyy" in panel_text(reporter)


# --- fks run in a real terminal ----------------------------------------------------------------

CHATTY = """
import os, sys, time
from pathlib import Path
counter = Path(os.environ["CHATTY_STATE"])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
for i in range(4):
    print(f"chatty says {n}.{i} \\x1b[31mred\\x1b[0m", flush=True)
    time.sleep(0.05)
gate = counter.with_name(f"go-{n}")
if os.environ.get("CHATTY_HOLD") == str(n):
    while not gate.exists():  # on screen until the test has seen it
        time.sleep(0.05)
if n >= 2:
    print("FORKHESTRA_COMPLETE", flush=True)
"""


@pytest.fixture
def chatty(tmp_path: Path) -> Path:
    """A directory with `chatty` on PATH: prints four lines, marker on iteration 2; iteration
    $CHATTY_HOLD waits after its lines until the file `go-N` exists next to the counter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    wrapper = bin_dir / "chatty"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    (tmp_path / "proj").mkdir()
    return tmp_path


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", os.devnull, *args],
            capture_output=True,
            text=True,
            env={**env, "TERM": "xterm-256color"},
            check=True,
            timeout=30,
        )
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p")

    def wait_for(self, ready: Callable[[str], bool], timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if ready(screen):
                return screen
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting; the terminal shows:\n{screen}")
            time.sleep(0.05)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux(f"fks-test-{uuid.uuid4().hex[:12]}")
    try:
        yield server
    finally:
        subprocess.run(
            ["tmux", "-L", server.socket, "kill-server"], capture_output=True, check=False
        )


def start_in_terminal(tmux: Tmux, chatty: Path, dsl: str, hold: int) -> None:
    """`fks run DSL` in the terminal, the agent holding in iteration `hold` (see `chatty`)."""
    exe = FKS
    script = chatty / "go.sh"
    # The shell survives a Ctrl-C (a trap, not an ignore: fks still gets SIGINT) and stays
    # open, so the screen and the cursor can be inspected after fks exits.
    script.write_text(
        "trap true INT\n"
        f"export PATH='{chatty / 'bin'}':\"$PATH\" CHATTY_STATE='{chatty / 'count'}'\n"
        f"export CHATTY_HOLD={hold}\n"
        f"cd '{chatty / 'proj'}' && '{exe}' run '{dsl}'\n"
        'echo "[exit $?]"\n'
        "sleep 600\n"
    )
    tmux("new-session", "-d", "-x", "120", "-y", "40", f"bash {script}")


def assert_clean_screen(tmux: Tmux, screen: str) -> None:
    assert not BOX & set(screen), f"panel left on screen:\n{screen}"
    assert "\x1b" not in screen and "[31m" not in screen and "?25" not in screen
    assert "waiting for output" not in screen and "chatty says" not in screen
    assert tmux("display-message", "-p", "#{cursor_flag}").strip() == "1", "cursor left hidden"


def test_live_view_in_a_terminal(tmux: Tmux, chatty: Path) -> None:
    start_in_terminal(tmux, chatty, "chatty:3", hold=2)
    running = tmux.wait_for(lambda s: "iteration 2/3" in s and "chatty says 2.1" in s)
    rows = running.splitlines()
    assert "[fks] Starting: chatty (max 3 iterations)" in rows
    header = next(row for row in rows if "Step 1/1" in row)
    assert header.startswith("│") and "chatty" in header and "run 0:0" in header
    panel_rows = [row for row in rows if row.startswith("│")]
    assert any("chatty says 2.0 red" in row for row in panel_rows)
    assert "[31m" not in running
    assert not any("chatty says 1." in row for row in rows), (
        "the last iteration's output should be gone"
    )

    (chatty / "go-2").touch()
    screen = tmux.wait_for(lambda s: "[exit " in s)
    lines = [line for line in screen.splitlines() if line.strip()]
    assert lines[0].startswith("[fks] Run ")
    assert lines[1:] == [
        "[fks] Starting: chatty (max 3 iterations)",
        "[fks] Complete after 2 iterations",
        "[fks] Chain complete (1/1 steps)",
        "[exit 0]",
    ]
    assert_clean_screen(tmux, screen)


def test_ctrl_c_in_a_terminal(tmux: Tmux, chatty: Path) -> None:
    start_in_terminal(tmux, chatty, "chatty:3", hold=1)
    tmux.wait_for(lambda s: "chatty says 1.1" in s)
    tmux("send-keys", "C-c")
    screen = tmux.wait_for(lambda s: "[exit " in s)
    assert "[exit 130]" in screen
    assert "[fks] Interrupted (SIGINT); continue with: fks run --resume " in screen
    assert_clean_screen(tmux, screen)


# --- fks run in a pipe --------------------------------------------------------------------------


def test_plain_lines_in_a_pipe(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "2")
    res = fks("run", "fake:3", cwd=project)
    assert res.code == 0, res.output
    assert "[fks] Iteration 2/3\n  │ fake agent iteration 2\n" in res.stdout
    assert "[fks] Complete after 2 iterations" in res.stdout
    assert "[fks] Chain complete (1/1 steps)" in res.stdout
    assert "\x1b" not in res.stdout and "\x1b" not in res.stderr
