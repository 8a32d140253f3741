"""Signals: SIGTERM/SIGHUP stop a run the way Ctrl-C does, and clean-up is never cut short; and
whether a process still lives (signal 0: `pid_alive`)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from sandbox_runner.errors import Interrupted

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP raise `Interrupted` so everything started gets stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold stop signals while clean-up runs (removing a container); re-raise after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _f: received.append(signum)) for sig in _STOP_SIGNALS
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if received:
        raise Interrupted(signal.Signals(received[0]).name)


def pid_alive(pid: int) -> bool:
    """Process `pid` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
