"""Sending a notice to every target that takes it, through Apprise (imported only here, when
there is something to send). Sending never fails or holds up a run for long: each target gets
connect and read timeouts, all of them together `timeout` seconds, and a failure is one line
and a delivery record that says so, never an exception."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbox_runner.errors import Interrupted
from sandbox_runner.notify.messages import Notice, inert
from sandbox_runner.plan.notify import Level, Target, url_secrets
from sandbox_runner.records.masking import Masker
from sandbox_runner.records.record import DeliveryRecord, now

TIMEOUT = 15.0
"""Seconds all the targets of one notice get together."""
SOCKET_TIMEOUT = 5.0
"""Seconds one target's connection gets to open, and to answer."""
_ERROR_LIMIT = 300


class _Captured(logging.Handler):
    """Apprise's warnings and errors, kept per sending thread (they can name a URL's parts:
    they are masked before they are shown or recorded, and never reach the terminal as they
    are)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.by_thread: dict[int, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.by_thread.setdefault(record.thread or 0, []).append(record.getMessage())


_CAPTURED = _Captured()


def _apprise_log() -> None:
    log = logging.getLogger("apprise")
    if _CAPTURED not in log.handlers:
        log.addHandler(_CAPTURED)
        log.propagate = False  # never Python's last-resort handler, which prints to stderr


@dataclass
class _Sending:
    target: Target
    ok: bool = False
    error: str | None = "timed out"
    thread: threading.Thread | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Notifier:
    """The run's notification targets, and what to mask in what is said of them."""

    targets: tuple[Target, ...] = ()
    secrets: tuple[str, ...] = ()
    """Values masked in errors besides the URLs' own parts (the run's credentials)."""
    timeout: float = TIMEOUT

    def __bool__(self) -> bool:
        return bool(self.targets)

    def send(
        self, notice: Notice, say: Callable[[str], None] | None = None
    ) -> list[DeliveryRecord]:
        """`notice` sent to every target that takes it, at once; one delivery record each
        (and, through `say`, one line for each that failed)."""
        chosen = [t for t in self.targets if t.wants(notice.events, notice.level)]
        if not chosen:
            return []
        _apprise_log()
        sendings = [_Sending(t) for t in chosen]
        for sending in sendings:
            sending.thread = threading.Thread(
                target=_deliver, args=(sending, notice), name="fks-notify", daemon=True
            )
            sending.thread.start()
        _wait(sendings, time.monotonic() + self.timeout)
        return [self._recorded(s, notice, say) for s in sendings]

    def _recorded(
        self, sending: _Sending, notice: Notice, say: Callable[[str], None] | None
    ) -> DeliveryRecord:
        target = sending.target
        error = None
        if not sending.ok:
            masker = Masker([*url_secrets([t.url for t in self.targets]), *self.secrets])
            error = inert(masker.mask_text(sending.error or "not sent"), _ERROR_LIMIT)
            if say is not None:
                say(
                    f"Notification ({notice.event}) to notify[{target.index}] "
                    f"({target.service}) failed: {error.rstrip('.')}; the run goes on"
                )
        return DeliveryRecord(
            event=notice.event.value,
            service=target.service,
            target=target.index,
            ok=sending.ok,
            time=now(),
            error=error,
        )


def _wait(sendings: list[_Sending], deadline: float) -> None:
    """Until every sending is done or `deadline` (`time.monotonic`) passes; Ctrl-C (or a
    signal) meanwhile stops the waiting, not what called it (a run's end is being told)."""
    try:
        for sending in sendings:
            assert sending.thread is not None
            sending.thread.join(max(0.0, deadline - time.monotonic()))
    except (Interrupted, KeyboardInterrupt):
        for sending in sendings:
            if sending.thread is not None and sending.thread.is_alive():
                sending.error = "interrupted while sending"


def _deliver(sending: _Sending, notice: Notice) -> None:
    """Send to one target (in a thread of its own); what happened is left in `sending`."""
    import apprise  # about half a second: only runs with notifications pay it

    ident = threading.get_ident()
    _CAPTURED.by_thread.pop(ident, None)
    try:
        plugin = apprise.Apprise.instantiate(sending.target.url, suppress_exceptions=True)
        if plugin is None:
            sending.error = "Apprise could not use the URL"
            return
        plugin.socket_connect_timeout = SOCKET_TIMEOUT
        plugin.socket_read_timeout = SOCKET_TIMEOUT
        kind = apprise.NotifyType(_TYPES[notice.level])
        sending.ok = bool(plugin.notify(body=notice.body, title=notice.title, notify_type=kind))
        sending.error = None if sending.ok else _last_error(ident)
    except Exception as exc:  # a plugin's bug must not end the run
        sending.ok, sending.error = False, f"{type(exc).__name__}: {exc}"
    finally:
        _CAPTURED.by_thread.pop(ident, None)


def _last_error(ident: int) -> str:
    said = _CAPTURED.by_thread.get(ident) or []
    lines = [line for text in said for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-2:]) if lines else "the service did not accept it"


_TYPES = {Level.INFO: "info", Level.WARNING: "warning", Level.FAILURE: "failure"}
