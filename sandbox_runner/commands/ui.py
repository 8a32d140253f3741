"""`fks ui`: serve the web view on 127.0.0.1 with a fresh token until Ctrl-C."""

from __future__ import annotations

import contextlib
import html
import importlib.util
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from sandbox_runner.commands.runs import open_store
from sandbox_runner.errors import EXIT_COMPLETE, UsageError
from sandbox_runner.notify.pages import published

_NEEDED = ("starlette", "uvicorn", "jinja2", "sse_starlette")
_GRACE = 2
"""Seconds open pages (their live streams) get to close when `fks ui` stops."""


def run(*, port: int, open_browser: bool, every: bool, cwd: Path | None) -> int:
    missing = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"fks ui needs the ui extra ({', '.join(missing)} missing): pip install 'fks[ui]'"
        )
    # The web stack is imported only once the ui extra is known to be there: without it,
    # `fks ui` names what to install instead of failing on an ImportError.
    from sandbox_runner.web.app import create_app
    from sandbox_runner.web.security import Guard
    from sandbox_runner.web.server import serve
    from sandbox_runner.web.sources import Sources

    sources = Sources.everywhere() if every else Sources((open_store(cwd).project,))
    listener = _listen(port)
    guard = Guard.fresh(listener.getsockname()[1])
    app = create_app(sources, guard)
    # Parse the run records while the user opens the page: the first answer is then as quick
    # as the next ones.
    threading.Thread(target=sources.runs, name="fks-ui-warm", daemon=True).start()
    print(f"fks ui: {guard.url()}  (Ctrl-C stops it)", flush=True)
    with contextlib.ExitStack() as stack:
        stack.enter_context(published(guard.origin, sources.projects))
        if open_browser:
            import webbrowser

            # The browser is started with what it opens on its command line, which every
            # local user can read (ps): it gets a file that only this user can read, and the
            # file takes it to the URL with the token.
            webbrowser.open(stack.enter_context(_opener(guard.url())).as_uri())
        serve(app, listener, grace=_GRACE)
    print("fks ui: stopped", flush=True)
    return EXIT_COMPLETE


@contextlib.contextmanager
def _opener(url: str) -> Iterator[Path]:
    """A page readable by this user only (0600, in a 0700 folder) that goes on to `url`;
    removed when the block ends."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    where = runtime if runtime and Path(runtime).is_dir() else None
    with tempfile.TemporaryDirectory(prefix="fks-ui-", dir=where) as folder:
        path = Path(folder) / "open.html"
        target = html.escape(url, quote=True)
        page = (
            '<!DOCTYPE html><html><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={target}"><title>fks ui</title></head>'
            f'<body><p><a href="{target}">Open fks ui</a></p></body></html>\n'
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(page)
        yield path


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
