"""`fks ui` in a real browser, for the tests: the server started as a user starts it, Debian's
chromium headless through Playwright (never a browser Playwright downloads), what each page
did (its requests, console errors, Content Security Policy violations) and a screenshot of
each page kept where CI keeps its artifacts."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fks_testing.helpers import FKS

if TYPE_CHECKING:
    import httpx
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright
    from playwright.sync_api import Request as PageRequest
    from playwright.sync_api import Response as PageResponse

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's chromium: the one browser the tests drive."""
CHECKOUT = Path(__file__).resolve().parents[2]
URL = re.compile(r"(http://fks-[0-9a-f]+\.localhost:(\d+))/\?token=([A-Za-z0-9_-]+)")
"""The URL `fks ui` prints: its origin (a `.localhost` name of its own), port and token."""
_CSP_PREFIX = "csp violation:"
# Injected by Playwright before any script of the page (outside the page's CSP): each
# violation the browser reports becomes a console error the test sees.
_REPORT_VIOLATIONS = (
    "document.addEventListener('securitypolicyviolation', function (e) {"
    f" console.error('{_CSP_PREFIX} ' + e.violatedDirective + ' ' + e.blockedURI); }}, true);"
)


def artifacts_dir() -> Path:
    """Where CI keeps what tests leave for people to look at: $FKS_TEST_ARTIFACTS, else
    `test-artifacts/` in the checkout (gitignored)."""
    given = os.environ.get("FKS_TEST_ARTIFACTS")
    return Path(given) if given else CHECKOUT / "test-artifacts"


@dataclass(frozen=True)
class UiServer:
    """A running `fks ui`: its origin (`http://fks-….localhost:PORT`, which chromium resolves
    itself) and the URL it printed (with the token)."""

    origin: str
    token: str
    process: subprocess.Popen[str]
    stderr: Path

    def errors(self) -> str:
        """What the server printed on stderr so far (a traceback says why a page failed)."""
        return self.stderr.read_text(errors="replace")[-4000:]

    @property
    def url(self) -> str:
        return f"{self.origin}/?token={self.token}"

    @property
    def port(self) -> int:
        return int(self.origin.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        """The `Host` its pages are served for: `fks-….localhost:PORT`."""
        return self.origin.removeprefix("http://")

    def client(self) -> httpx.Client:
        """An HTTP client (without the cookie) that reaches it as a browser does: it connects
        to 127.0.0.1 and names its host (the system resolver may not know `.localhost`)."""
        import httpx

        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"host": self.host}, timeout=60
        )


@contextmanager
def serve(repo: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[UiServer]:
    """`fks ui --port 0 ARGS` in `repo`, as a user runs it, until the block ends (Ctrl-C)."""
    with tempfile.TemporaryDirectory(prefix="fks-ui-") as kept:
        stderr = Path(kept) / "stderr"
        with stderr.open("w") as err:
            proc = subprocess.Popen(
                [FKS, "ui", "--port", "0", *args],
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, **(env or {})},
            )
        try:
            found = URL.search(_first_line(proc))
            if found is None:
                proc.kill()
                proc.wait(timeout=30)
                raise AssertionError(
                    f"fks ui printed no URL (exit {proc.returncode}): {stderr.read_text()[-2000:]}"
                )
            yield UiServer(found.group(1), found.group(3), proc, stderr)
        finally:
            _stop(proc)


def _first_line(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return ""


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's chromium, headless, driven by Playwright (which downloads nothing)."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    with sync_playwright() as playwright:
        yield _launch(playwright)


def _launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
    )


@dataclass
class Watched:
    """One browser page and everything it did: the URL of each request, console errors
    (CSP violations among them) and pages that failed to load."""

    page: Page
    origin: str
    screenshots: Path
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    shots: int = 0

    def goto(self, path: str, status: int = 200) -> PageResponse:
        response = self.page.goto(self.origin + path)
        assert response is not None, path
        assert response.status == status, f"{path}: {response.status} {response.text()[:500]}"
        return response

    def screenshot(self, label: str) -> Path:
        """A full-page screenshot, kept as `<test name>-<n>-<label>.png`."""
        self.shots += 1
        path = self.screenshots.with_name(f"{self.screenshots.name}-{self.shots}-{label}.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return path

    @property
    def violations(self) -> list[str]:
        return [e for e in self.errors if _CSP_PREFIX in e or "Content Security Policy" in e]

    def foreign_requests(self) -> list[str]:
        return [url for url in self.requests if not _same_origin(url, self.origin)]

    def assert_clean(self) -> None:
        """Nothing fetched from another origin, no console error, no CSP violation."""
        assert self.foreign_requests() == [], self.foreign_requests()
        assert self.errors == [], self.errors


def _same_origin(url: str, origin: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "about") or f"{parts.scheme}://{parts.netloc}" == origin


@contextmanager
def watched_page(browser: Browser, server: UiServer, test_name: str) -> Iterator[Watched]:
    """A fresh browser context (no cookies) with one page, logged in with the server's
    token, watched from its first request."""
    context: BrowserContext = browser.new_context()
    try:
        page = context.new_page()
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:120]
        watched = Watched(page, server.origin, artifacts_dir() / "screenshots" / name)
        context.add_init_script(script=_REPORT_VIOLATIONS)
        context.on("request", lambda request: watched.requests.append(_url(request)))
        page.on("console", lambda message: _console(watched, message))
        page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
        page.on("response", lambda response: _status(watched, response))
        response = page.goto(server.url)
        assert response is not None, server.url
        assert response.status == 200, f"{response.status}: {server.errors()}"
        page.wait_for_url(f"{server.origin}/")  # the page with the token goes on without it
        yield watched
    finally:
        context.close()


def _url(request: PageRequest) -> str:
    return request.url


def _status(watched: Watched, response: PageResponse) -> None:
    if response.status >= 400:
        watched.errors.append(f"{response.status} {response.url}")


def _console(watched: Watched, message: ConsoleMessage) -> None:
    if message.type == "error":
        where = message.location.get("url") or "?"
        watched.errors.append(f"{message.text} ({where})")


class MarkerServer:
    """A local HTTP server on another port (another origin) that records what is asked of it:
    a payload that made the browser fetch from it shows up in `hits`, the headers of each
    request in `headers`. It serves `page` (an attacker's page) at /attack."""

    def __init__(self, page: str = "") -> None:
        self.hits: list[str] = []
        self.headers: list[dict[str, str]] = []
        hits, seen = self.hits, self.headers
        body = page.encode()

        class Recorder(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                seen.append({name.lower(): value for name, value in self.headers.items()})
                if self.path == "/attack":
                    self.send_response(200)
                    self.send_header("content-type", "text/html; charset=utf-8")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MarkerServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
