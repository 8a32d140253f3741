"""`fks ui`: serve the web view on 127.0.0.1 with a fresh token until Ctrl-C."""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import socket
import sys
import threading
from pathlib import Path

from sandbox_runner.errors import EXIT_COMPLETE, UsageError

_NEEDED = ("starlette", "uvicorn", "jinja2", "sse_starlette")
_GRACE = 2
"""Seconds open pages (their live streams) get to close when `fks ui` stops."""


def run(*, port: int, open_browser: bool, every: bool, cwd: Path | None) -> int:
    missing = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"fks ui needs the ui extra ({', '.join(missing)} missing): pip install 'fks[ui]'"
        )
    import uvicorn

    from sandbox_runner.commands.runs import open_store
    from sandbox_runner.web.app import create_app
    from sandbox_runner.web.security import Guard
    from sandbox_runner.web.sources import Sources

    sources = Sources.everywhere() if every else Sources((open_store(cwd).project,))
    listener = _listen(port)
    guard = Guard(token=secrets.token_urlsafe(24), port=listener.getsockname()[1])
    app = create_app(sources, guard)
    # Parse the run records while the user opens the page: the first answer is then as quick
    # as the next ones.
    threading.Thread(target=sources.runs, name="fks-ui-warm", daemon=True).start()
    print(f"fks ui: {guard.url()}  (Ctrl-C stops it)", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(guard.url())
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=_GRACE,
    )
    # uvicorn stops on Ctrl-C, then raises it again: stopping is how `fks ui` ends.
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[listener])
    print("fks ui: stopped", flush=True)
    return EXIT_COMPLETE


def _listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` (0: any free port); one line if it is taken."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        listener.close()
        raise UsageError(
            f"--port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror}); "
            "give another port or leave it out"
        ) from None
    listener.listen(128)
    sys.stdout.flush()
    return listener
