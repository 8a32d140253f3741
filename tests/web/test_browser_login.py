"""Logging in to `fks ui` in Debian's chromium leaves nothing for any other local server: its
cookie is for its own `.localhost` host name, so another server on 127.0.0.1 or localhost (a dev
server, a notebook) that the user visits next gets neither the cookie nor the name, not even
in a `Referer`. And `fks ui --open` starts the browser with no token on its command line (which
every local user can read): a file only the user can read takes the browser to the URL."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from fks_testing.browser import MarkerServer, UiServer, Watched, serve
from fks_testing.helpers import init_repo
from fks_testing.records import make_run, save_run
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.browser

OpenPage = Callable[[UiServer], Watched]
RUN_ID = "20261101-090000-abcd"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    save_run(path, make_run(RUN_ID, chain="ralph"))
    return path


def test_no_other_local_server_gets_the_cookie_or_the_name(repo: Path, open_page: OpenPage) -> None:
    with serve(repo) as server, MarkerServer(page="<p>another local server</p>") as other:
        page = open_page(server)  # logged in: the runs page, by the cookie
        expect(page.page.get_by_text(RUN_ID).first).to_be_visible()
        (cookie,) = page.page.context.cookies()
        assert cookie["domain"] == urlsplit(server.origin).hostname
        tab = page.page
        for name in ("127.0.0.1", "localhost"):
            tab.goto(f"http://{name}:{other.port}/attack")  # the user visits another server
            expect(tab.locator("body")).to_contain_text("another local server")
        # A link on one of fks ui's pages, followed: no Referer names fks ui.
        page.goto(f"/runs/0/{RUN_ID}")
        tab.evaluate(
            "url => { const a = document.createElement('a'); a.href = url; a.id = 'out';"
            " a.textContent = 'elsewhere';"
            " document.body.append(a); }",
            f"{other.url}/attack",
        )
        tab.click("#out")
        tab.wait_for_url(f"{other.url}/attack")
        assert other.hits.count("/attack") == 3, other.hits
        for headers in other.headers:
            said = " ".join(headers.values())
            assert "cookie" not in headers, headers
            assert server.token not in said and server.host.split(":")[0] not in said, headers
        # fks ui itself under those names: no page, whatever cookie the browser holds.
        for name in ("127.0.0.1", "localhost"):
            refused = tab.goto(f"http://{name}:{server.port}/")
            assert refused is not None and refused.status == 403
            assert RUN_ID not in tab.content()


def test_open_puts_no_token_on_the_browsers_command_line(
    repo: Path, tmp_path: Path, browser: Browser
) -> None:
    argv_file = tmp_path / "argv"
    fake = tmp_path / "browser.sh"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {argv_file}\n')
    fake.chmod(0o755)
    with serve(repo, "--open", env={"BROWSER": str(fake)}) as server:
        argv = _wait_for(argv_file).splitlines()
        assert server.token not in "".join(argv), argv
        assert server.host.split(":")[0] not in "".join(argv), argv
        opened = Path(unquote(urlsplit(argv[-1]).path))
        assert argv[-1].startswith("file://") and opened.is_file()
        assert stat.S_IMODE(opened.stat().st_mode) == 0o600
        assert stat.S_IMODE(opened.parent.stat().st_mode) == 0o700
        assert opened.stat().st_uid == os.getuid()
        context = browser.new_context()
        try:
            tab = context.new_page()
            tab.goto(argv[-1])  # what the browser does with its argument
            tab.wait_for_url(f"{server.origin}/")
            expect(tab.get_by_text(RUN_ID).first).to_be_visible()
        finally:
            context.close()
    assert not opened.exists() and not opened.parent.exists()


def _wait_for(path: Path, timeout: float = 30) -> str:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"the browser was not started ({path})"
        time.sleep(0.05)
    return path.read_text()
