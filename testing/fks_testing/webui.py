"""The real `fks ui` as a subprocess, for the tests that talk to it over HTTP: its URL, token,
host name and port, an httpx client that carries its cookie, and a clean stop.

Its host name (`fks-….localhost`) is one that browsers resolve themselves; the system resolver
may not (or may ask a DNS server): clients here connect to 127.0.0.1 and say the name in the
`Host` header, as a browser does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from fks_testing.helpers import FKS

_URL = re.compile(r"http://(fks-[0-9a-f]+\.localhost):(\d+)/\?token=([A-Za-z0-9_-]+)")


@dataclass
class UiServer:
    """A running `fks ui`."""

    process: subprocess.Popen[str]
    url: str
    name: str
    port: int
    token: str
    first_line: str

    @property
    def base(self) -> str:
        """Where to connect: 127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        """The `Host` its pages are served for: `fks-….localhost:PORT`."""
        return f"{self.name}:{self.port}"

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    @property
    def cookie(self) -> str:
        return f"fks_ui_{self.port}"

    def client(self, timeout: float = 60.0) -> httpx.Client:
        """A client that has the token's cookie (as a browser has after opening the URL)."""
        return httpx.Client(
            base_url=self.base,
            headers={"host": self.host},
            cookies={self.cookie: self.token},
            timeout=timeout,
        )

    def stop(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """Ctrl-C; its exit code, the rest of its output and its stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err


@contextmanager
def ui_server(
    *args: str, cwd: Path, env: dict[str, str] | None = None, files: int | None = None
) -> Iterator[UiServer]:
    """`fks ui ARGS` in `cwd`, until the block ends (then stopped with Ctrl-C if still there);
    `files`: the number of file descriptors it may open (soft and hard limit)."""
    process = subprocess.Popen(
        _limited([FKS, "ui", *args], files),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # fks ui prints its URL first, or exits
        found = _URL.search(line)
        if found is None:
            process.kill()
            out, err = process.communicate(timeout=30)
            raise AssertionError(f"fks ui printed no URL: {line!r} {out!r} {err!r}")
        name, port, token = found.group(1), int(found.group(2)), found.group(3)
        yield UiServer(process, found.group(0), name, port, token, line)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def _limited(argv: list[str], files: int | None) -> list[str]:
    """`argv`, run with at most `files` file descriptors if given."""
    if files is None:
        return argv
    return ["/bin/sh", "-c", 'ulimit -n "$0" && exec "$@"', str(files), *argv]
