"""`fks forge run`'s conductor: pick the tasks, keep up to N worker processes going (one task
each), show their lines as they come, and stop them all on Ctrl-C.

Workers run in sessions of their own so that exactly one signal reaches each, from here.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from sandbox_runner.console.lines import LINE_BYTES, bounded_lines, shown_line
from sandbox_runner.console.output import plural
from sandbox_runner.errors import FksError, Interrupted
from sandbox_runner.plan.config_file import CONFIG_BYTES
from sandbox_runner.programs import fks_python, host_env

WORKER_GRACE = 60.0
"""Seconds interrupted workers get to stop their containers and save their records."""


@dataclass
class Worker:
    """One task in flight."""

    task_id: str
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    last: str = ""
    stage: str = "starting"


class ForgeView(Protocol):
    """What the conductor reports to (`console.forge_view` shows it). Texts are as the workers
    printed them: the view makes them safe to show."""

    def line(self, task_id: str, text: str) -> None:
        """A line task `task_id`'s worker printed."""

    def note(self, text: str) -> None:
        """A line of the conductor's own."""

    def tick(self, workers: Sequence[Worker]) -> None:
        """Called about every 0.2 s with the workers in flight."""

    def close(self) -> None:
        """The run is over."""


@dataclass
class Conductor:
    """Runs `argv_for(task_id)` for each task `pick` gives, `parallel` at a time."""

    pick: Callable[[Sequence[str]], str | None]
    """The next task to start, given those started so far (None: no more), asked each time a
    place is free, so that what is ready is decided then, not once at the start."""
    parallel: int
    argv_for: Callable[[str], list[str]]
    view: ForgeView
    cwd: Path
    env: dict[str, str] = field(default_factory=host_env)
    keep_going: Callable[[], bool] = lambda: True
    """Checked before each start (e.g. the budget)."""
    exit_codes: dict[str, int] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    _no_more: bool = False
    _lines: queue.Queue[tuple[str, str | None]] = field(default_factory=queue.Queue)

    def run(self) -> dict[str, int]:
        """Exit code of each worker that ran; raises Interrupted after stopping them all."""
        running: dict[str, Worker] = {}
        ask = True  # asked again once a worker ends: what it landed may make others ready
        try:
            while True:
                while ask and len(running) < self.parallel and self.keep_going():
                    task_id = self._pick()
                    if task_id is None:
                        ask = False
                        break
                    self.started.append(task_id)
                    running[task_id] = self._start(task_id)
                if not running:
                    return self.exit_codes
                before = len(running)
                self._drain(running, timeout=0.2)
                ask = ask or (len(running) < before and not self._no_more)
                self.view.tick(list(running.values()))
        except (KeyboardInterrupt, Interrupted) as exc:
            self._stop(running, exc)
            raise Interrupted(getattr(exc, "signal_name", "SIGINT")) from None

    def _pick(self) -> str | None:
        try:
            return self.pick(self.started)
        except FksError as exc:  # e.g. a task file broken meanwhile: finish what runs
            self.view.note(f"No more tasks started: {exc}")
            self._no_more = True
            return None

    def _start(self, task_id: str) -> Worker:
        proc = subprocess.Popen(
            self.argv_for(task_id),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(task_id, proc.stdout), daemon=True).start()
        return Worker(task_id, proc)

    def _read(self, task_id: str, pipe: IO[bytes]) -> None:
        # A worker passes on what its agent prints: a line may be of any length.
        for raw, cut in bounded_lines(pipe, LINE_BYTES):
            self._lines.put((task_id, shown_line(raw.rstrip(b"\r"), cut)))
        self._lines.put((task_id, None))

    def _drain(self, running: dict[str, Worker], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                task_id, text = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            worker = running.get(task_id)
            if text is None:
                if worker is not None:
                    self.exit_codes[task_id] = worker.proc.wait()
                    del running[task_id]
                continue
            if worker is not None:
                worker.last = text
                if text.startswith("[fks] Stage: "):
                    worker.stage = text.removeprefix("[fks] Stage: ")
            self.view.line(task_id, text)

    def _stop(self, running: dict[str, Worker], exc: BaseException) -> None:
        name = getattr(exc, "signal_name", "SIGINT")
        sig = signal.SIGINT if name == "SIGINT" else signal.SIGTERM
        self.view.note(f"Interrupted: stopping {plural(len(running), 'task')} in flight")
        for worker in running.values():
            if worker.proc.poll() is None:
                os.kill(worker.proc.pid, sig)
        deadline = time.monotonic() + WORKER_GRACE
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan them
        try:
            while running and time.monotonic() < deadline:
                self._drain(running, timeout=0.2)
            for worker in running.values():
                worker.proc.kill()
                self.exit_codes[worker.task_id] = worker.proc.wait()
        finally:
            signal.signal(signal.SIGINT, old)


def worker_argv(args: Sequence[str]) -> Callable[[str], list[str]]:
    """The command of one worker: this fks, `forge _worker TASK` and the run's options. Run in
    the project, it never imports from there (`-P`: a task's commits may have put an
    `inspect.py` or a `sandbox_runner/` at its top)."""
    return lambda task_id: fks_python("sandbox_runner", "forge", "_worker", task_id, *args)


@contextlib.contextmanager
def session_config(config: Path) -> Iterator[Path]:
    """A copy of the config file as the session found it (`{}` when there is none), which every
    worker reads instead: a task that lands a `forge/chains.json` (with wider `mounts`, `env`,
    `allow`, `network`, a secret sent elsewhere) changes nothing for the session's later tasks.
    Removed when the session ends."""
    try:
        with config.open("rb") as handle:
            data = handle.read(CONFIG_BYTES + 1)
    except FileNotFoundError:
        data = b"{}"
    with tempfile.TemporaryDirectory(prefix="fks-forge-") as folder:
        copy = Path(folder) / "chains.json"
        copy.write_bytes(data)
        yield copy
