"""`fks ui` as a user runs it: the URL and its token, who is refused, a port already taken, the
ui extra missing, Ctrl-C, `--all`, and `fks --help` without the web libraries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from fks_testing.helpers import FKS, Result, fks, init_repo, one_line_error
from fks_testing.records import START, make_run, save_run
from fks_testing.webui import ui_server

from sandbox_runner.records.projects import remember_project
from sandbox_runner.web.server import HEAD_TIMEOUT


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    save_run(path, make_run("20261101-090000-abcd", chain="ralph"))
    return path


def test_the_url_carries_the_token_and_only_it_opens_the_page(repo: Path) -> None:
    with ui_server(cwd=repo) as ui:
        assert ui.first_line.startswith(f"fks ui: {ui.url}")
        assert ui.url.startswith(f"http://{ui.name}:{ui.port}/?token=")
        named = {"host": ui.host}
        bare = httpx.get(f"{ui.base}/", headers=named, timeout=60)
        assert bare.status_code == 403 and "open the URL that `fks ui` printed" in bare.text
        wrong = httpx.get(f"{ui.base}/", headers=named, cookies={ui.cookie: "x" + ui.token})
        assert wrong.status_code == 403
        opened = httpx.get(f"{ui.base}/?token={ui.token}", headers=named, timeout=60)
        # A page that goes on to the same URL without the token (a redirect would lose the
        # SameSite=Strict cookie when the URL was opened from another site or a file).
        assert opened.status_code == 200
        assert f'http-equiv="refresh" content="0;url={ui.origin}/"' in opened.text
        assert ui.token not in opened.text
        cookie = opened.headers["set-cookie"]
        assert f"{ui.cookie}={ui.token}" in cookie and "Domain" not in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = httpx.get(f"{ui.base}/", headers=named, cookies={ui.cookie: ui.token})
        assert page.status_code == 200
        assert "20261101-090000-abcd" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]


def test_on_127_0_0_1_the_token_only_moves_the_browser_to_its_host_name(repo: Path) -> None:
    """The same port under 127.0.0.1 or localhost serves no page and sets no cookie (a cookie
    for those names goes to every server on them); the printed URL typed with 127.0.0.1 moves
    to fks ui's own name."""
    with ui_server(cwd=repo) as ui, httpx.Client(timeout=60) as client:
        for name in ("127.0.0.1", "localhost"):
            host = {"host": f"{name}:{ui.port}"}
            moved = client.get(f"{ui.base}/runs/0/x?token={ui.token}", headers=host)
            assert moved.status_code == 303, moved.text
            assert moved.headers["location"] == f"{ui.origin}/runs/0/x?token={ui.token}"
            assert "set-cookie" not in moved.headers
            for cookie in ({}, {"cookie": f"{ui.cookie}={ui.token}"}):
                refused = client.get(f"{ui.base}/", headers={**host, **cookie})
                assert refused.status_code == 403 and ui.name not in refused.text
                assert "20261101-090000-abcd" not in refused.text
            wrong = client.get(f"{ui.base}/?token=x{ui.token}", headers=host)
            assert wrong.status_code == 403 and ui.name not in wrong.text


def test_another_host_or_a_foreign_origin_is_refused(repo: Path) -> None:
    with ui_server(cwd=repo) as ui, ui.client() as client:
        rebound = client.get("/", headers={"Host": f"attacker.example:{ui.port}"})
        assert rebound.status_code == 400 and "Runs" not in rebound.text
        cross = client.post("/", headers={"Origin": "http://attacker.example"})
        assert cross.status_code == 403 and "another site" in cross.text
        blind = client.post("/")  # no Origin: not from fks ui's own pages either
        assert blind.status_code == 403
        assert client.get("/").status_code == 200


def test_a_flood_of_half_sent_requests_leaves_the_owners_pages_answering(repo: Path) -> None:
    """Any local process may connect (no token needed to open a connection): 1,100 requests
    that are never finished would hold every descriptor of a process with the usual 1,024,
    and the owner's pages would not be answered any more."""
    head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    with (
        ui_server(cwd=repo, files=1024) as ui,
        ui.client(timeout=10) as client,
        ExitStack() as held,
    ):
        for _ in range(1100):
            try:
                flood = held.enter_context(socket.create_connection(("127.0.0.1", ui.port), 5))
                flood.sendall(head)
            except OSError:
                break  # the server accepts no more connections: the owner's turn
        started = time.monotonic()
        try:
            page = client.get("/")
        except httpx.TimeoutException as exc:
            raise AssertionError(f"the owner's page was not answered: {exc!r}") from None
        assert page.status_code == 200 and "20261101-090000-abcd" in page.text
        assert time.monotonic() - started < 5
        code, _, err = ui.stop()
    assert code == 0 and "Traceback" not in err, err


def test_a_request_head_that_never_ends_is_cut_off(repo: Path) -> None:
    with ui_server(cwd=repo) as ui, socket.create_connection(("127.0.0.1", ui.port), 5) as slow:
        slow.sendall(f"GET / HTTP/1.1\r\nHost: {ui.host}\r\n".encode())
        slow.settimeout(HEAD_TIMEOUT + 10)
        started = time.monotonic()
        assert slow.recv(100) == b""  # closed, nothing answered
        assert HEAD_TIMEOUT - 1 < time.monotonic() - started < HEAD_TIMEOUT + 5


def test_a_port_in_use_is_one_line(repo: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = fks("ui", "--port", str(port), cwd=repo)
    one_line_error(done, f"--port {port}: cannot listen on 127.0.0.1:{port}")
    assert "give another port" in done.stderr
    assert done.stdout == ""


def test_without_the_ui_extra_it_says_how_to_install_it(repo: Path) -> None:
    blocked = (
        "import sys; sys.modules['sse_starlette'] = None; sys.argv = ['fks', 'ui']; "
        "from sandbox_runner.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], cwd=repo, capture_output=True, text=True, check=False
    )
    one_line_error(
        Result(done.returncode, done.stdout, done.stderr), "needs the ui extra (sse_starlette"
    )
    assert "pip install 'fks[ui]'" in done.stderr


def test_ctrl_c_stops_it_cleanly_with_a_page_open(repo: Path) -> None:
    live_stream = {"topic": "runs", "since": "0"}
    with (
        ui_server(cwd=repo) as ui,
        ui.client() as client,
        client.stream("GET", "/events", params=live_stream) as live,
    ):
        lines = live.iter_lines()
        assert next(line for line in lines if line.startswith("event:")) == "event: changed"
        code, out, err = ui.stop()
        list(lines)  # returns: the stream ends with the server
    assert code == 0, err
    assert out.strip() == "fks ui: stopped"
    assert "Traceback" not in err and "ERROR" not in err, err


def test_all_lists_the_runs_of_every_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Projects of this test's own: the worker's state lists every project its tests ran in.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    one, two = init_repo(tmp_path / "first"), init_repo(tmp_path / "second")
    save_run(one, make_run("20261101-090000-0001", started=START))
    save_run(two, make_run("20261102-090000-0002", started=START.replace(day=2)))
    for path in (one, two):
        remember_project(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with ui_server("--all", cwd=elsewhere) as ui, ui.client() as client:
        page = client.get("/").text
    for name, run_id in (("first", "20261101-090000-0001"), ("second", "20261102-090000-0002")):
        assert run_id in page
        assert f'title="{tmp_path / name}">{name}</td>' in page


def test_help_does_not_load_the_web_libraries() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", FKS, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert " ui " in done.stdout or "│ ui" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    assert "typer" in imported  # the check sees what --help imports
    assert not imported & {"starlette", "uvicorn", "jinja2", "sse_starlette", "httpx"}


def test_ui_help_is_true() -> None:
    done = fks("ui", "--help", env={"COLUMNS": "200"})
    assert done.code == 0
    for option in ("--port", "--open", "--all", "--cwd"):
        assert option in done.stdout
    assert "127.0.0.1" in done.stdout and "token" in done.stdout
