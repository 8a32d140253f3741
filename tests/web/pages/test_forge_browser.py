"""The forge page in Debian's chromium (headless, through Playwright): an answer typed into the
board's form is recorded, and what an agent wrote on the board runs nothing."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.browser import URL
from fks_testing.forge import new_task
from fks_testing.helpers import FKS, init_repo
from playwright import sync_api

from sandbox_runner.forge.work import WorkItem, WorkStore

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
MARK = "document.documentElement.dataset.pwned='1'"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo")
    monkeypatch.chdir(path)
    return path


@pytest.fixture
def served(repo: Path) -> Iterator[str]:
    """`fks ui` serving `repo`: the URL it printed."""
    proc = subprocess.Popen([FKS, "ui", "--port", "0"], cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        found = URL.search(proc.stdout.readline())
        assert found, "fks ui printed no URL"
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait()


def test_an_answer_typed_on_the_board_is_recorded_and_agent_text_runs_nothing(
    repo: Path, served: str, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, f'<img src=x onerror="{MARK}"> pick', capsys)
    question = f'Red or blue?<script>{MARK}</script><a href="javascript:{MARK}">x</a>'
    WorkStore(repo).ask(WorkItem(task_id=task_id, stage="architect"), question)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(served)
        page.goto(served.split("/?")[0] + "/forge")
        card = page.locator(f"article#{task_id}")
        assert "Red or blue?<script>" in card.inner_text()  # shown as text
        card.locator("textarea").fill("Blue, surely.")
        card.locator("button[type=submit]").click()
        page.wait_for_url(re.compile(rf"/forge/0#{task_id}$"))
        assert "Blue, surely." in page.locator(f"article#{task_id}").inner_text()
        assert page.evaluate("document.documentElement.dataset.pwned") is None
        browser.close()
    assert not dialogs
    item = WorkStore(repo).get(task_id)
    assert item is not None and item.answer == "Blue, surely."
