"""`fks ui` as a user runs it: the URL and its token, who is refused, a port already taken, the
ui extra missing, Ctrl-C, `--all`, and `fks --help` without the web libraries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sandbox_runner.records.projects import remember_project
from sandbox_runner.testing.helpers import FKS, Result, fks, init_repo, one_line_error
from sandbox_runner.testing.records import START, make_run, save_run
from sandbox_runner.testing.webui import ui_server


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    save_run(path, make_run("20261101-090000-abcd", chain="ralph"))
    return path


def test_the_url_carries_the_token_and_only_it_opens_the_page(repo: Path) -> None:
    with ui_server(cwd=repo) as ui:
        assert ui.first_line.startswith(f"fks ui: {ui.url}")
        bare = httpx.get(f"{ui.base}/", timeout=60)
        assert bare.status_code == 403 and "open the URL that `fks ui` printed" in bare.text
        wrong = httpx.get(f"{ui.base}/", cookies={ui.cookie: "x" + ui.token}, timeout=60)
        assert wrong.status_code == 403
        opened = httpx.get(ui.url, timeout=60)
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"]
        assert f"{ui.cookie}={ui.token}" in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = httpx.get(f"{ui.base}/", cookies={ui.cookie: ui.token}, timeout=60)
        assert page.status_code == 200
        assert "20261101-090000-abcd" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]


def test_another_host_or_a_foreign_origin_is_refused(repo: Path) -> None:
    with ui_server(cwd=repo) as ui, ui.client() as client:
        rebound = client.get("/", headers={"Host": f"attacker.example:{ui.port}"})
        assert rebound.status_code == 400 and "Runs" not in rebound.text
        cross = client.post("/", headers={"Origin": "http://attacker.example"})
        assert cross.status_code == 403 and "another site" in cross.text
        blind = client.post("/")  # no Origin: not from fks ui's own pages either
        assert blind.status_code == 403
        assert client.get("/").status_code == 200


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


def test_all_lists_the_runs_of_every_project(tmp_path: Path) -> None:
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
