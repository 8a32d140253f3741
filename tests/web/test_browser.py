"""`fks ui` in Debian's chromium, as a user sees it: runs that a sandboxed agent made, a run's
timeline and diff, a run that updates live, and the forge board answering a question."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fks_testing.browser import UiServer, Watched, serve
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import FKS, fks, git, init_repo
from fks_testing.sandboxed import COMMIT_AGENT, add_script, configure, waiting_agent
from playwright.sync_api import Browser, expect

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.xdist_group("browser")]

OpenPage = Callable[[UiServer], Watched]


@dataclass(frozen=True)
class Made:
    """A repository and the runs a sandboxed agent made in it."""

    repo: Path
    runs: tuple[str, ...]
    env: dict[str, str]


def sandboxed_runs(repo: Path, env: dict[str, str], *dsls: str) -> tuple[str, ...]:
    made: list[str] = []
    for dsl in dsls:
        done = fks("run", dsl, "--sandbox", cwd=repo, env=env, timeout=300)
        assert done.code == 0, done.output
        made += [p.name for p in (repo / ".forge" / "runs").iterdir() if p.name not in made]
    return tuple(made)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """Two runs of a sandboxed agent that commits a file each iteration."""
    base = tmp_path_factory.mktemp("made")
    env = {"XDG_STATE_HOME": str(base / "state"), "MARK_AT": "2"}
    repo = init_repo(base / "repo", {"README.md": "hello\n"})
    add_script(repo, "commit.sh", COMMIT_AGENT)
    flags = base / "flags"
    flags.mkdir()
    add_script(repo, "wait.sh", waiting_agent(flags, "echo waiting; echo live > live.txt"))
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    return Made(
        repo, sandboxed_runs(repo, env, "./scripts/commit.sh:2", "./scripts/commit.sh:1"), env
    )


def test_the_runs_page_lists_the_runs_a_sandboxed_agent_made(
    made: Made, open_page: OpenPage
) -> None:
    with serve(made.repo, env=made.env) as server:
        page = open_page(server)
        for run_id in made.runs:
            expect(page.page.get_by_text(run_id).first).to_be_visible()
        expect(page.page.locator("footer")).to_contain_text("fks runs")
        page.screenshot("runs")
        page.assert_clean()


def test_a_run_page_shows_the_timeline_commits_and_diff(made: Made, open_page: OpenPage) -> None:
    with serve(made.repo, env=made.env) as server:
        page = open_page(server)
        tab = page.page
        page.goto(f"/runs/0/{made.runs[0]}")
        expect(tab.locator("h1")).to_contain_text(made.runs[0])
        expect(tab.locator("svg.timeline rect.bar")).to_have_count(2)  # two iterations
        expect(tab.locator("svg.timeline rect.o-incomplete")).to_have_count(1)
        expect(tab.locator("svg.timeline rect.o-complete")).to_have_count(1)
        commits = tab.locator("table.commits")
        expect(commits).to_contain_text("agent: work 1")
        expect(commits).to_contain_text("agent: work 2")
        expect(tab.locator("pre.diff")).to_contain_text("+work 2")
        page.screenshot("run")
        tab.locator("svg.timeline a").nth(1).click()  # the second iteration's bar
        expect(tab.locator("main")).to_contain_text("iteration 2 as")
        page.screenshot("iteration")
        page.assert_clean()


def test_the_pages_work_without_javascript(made: Made, browser: Browser) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        with serve(made.repo, env=made.env) as server:
            tab = context.new_page()
            response = tab.goto(server.url)
            assert response is not None and response.status == 200
            tab.goto(f"{server.origin}/runs/0/{made.runs[0]}")
            expect(tab.locator("table.commits")).to_contain_text("agent: work 2")
            tab.get_by_role("navigation").get_by_role("link", name="forge").click()
            expect(tab.locator("h1")).to_contain_text("Forge")
    finally:
        context.close()


def test_artifacts_go_where_ci_keeps_them(
    made: Made, open_page: OpenPage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FKS_TEST_ARTIFACTS", str(tmp_path / "kept"))
    with serve(made.repo, env=made.env) as server:
        shot = open_page(server).screenshot("runs")
    assert shot.parent == tmp_path / "kept" / "screenshots"
    assert shot.name.startswith("test_artifacts_go_where_ci_keeps_them")
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert shot.stat().st_size > 1000


@contextmanager
def waiting_run(repo: Path, env: dict[str, str], flags: Path) -> Iterator[str]:
    """`fks run --sandbox` of an agent that waits for `flags/go`: yields the run's id once its
    first iteration has started; the run must have finished when the block ends."""
    runs = repo / ".forge" / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    proc = subprocess.Popen(
        [FKS, "run", "./scripts/wait.sh:1", "--sandbox"],
        cwd=repo,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (started := [p for p in set(runs.glob("*")) - before if _iterating(p)]):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the run never started its first iteration"
            time.sleep(0.1)
        yield started[0].name
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:  # Ctrl-C: fks removes its containers and keeps the work
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def _iterating(run: Path) -> bool:
    try:
        record = json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return any(step.get("iterations") for step in record.get("steps", []))


def test_a_running_run_updates_its_page_live(made: Made, open_page: OpenPage) -> None:
    flags = made.repo.parent / "flags"
    with serve(made.repo, env=made.env) as server:
        page = open_page(server)
        with waiting_run(made.repo, made.env, flags) as run_id:
            # The runs page was open before the run began: it shows the run by itself.
            new_run = page.page.get_by_role("link", name=run_id).first
            expect(new_run).to_be_visible(timeout=60_000)
            new_run.click()
            status = page.page.locator("dl.facts dd.status")
            expect(status).to_contain_text("running")
            page.screenshot("running")
            (flags / "go").touch()
            expect(status).to_contain_text("complete", timeout=120_000)
        page.screenshot("finished")
        page.assert_clean()


# --- the forge board -----------------------------------------------------------------------------

ANSWER = "Use blue."


def clarifying_team(request: Request) -> Any:
    """Plays the forge agents: the analysis is not enough, the architect asks which colour
    until the human's answer is in its prompt; then the task is implemented and approved."""
    system, results = request.system_text, json.dumps(request.tool_results)
    reviewing = "You review the implementation of one task" in system
    if reviewing and "Structured output" not in results and "+blue" in results:
        return [{"tool": "StructuredOutput", "input": {"approved": True}}]
    if any(r for r in request.tool_results):
        return [{"text": "Done."}]
    if "You analyze one task" in system:
        plan = {"complexity": "low", "plan": "Write it.", "sufficient": False}
        return [{"tool": "StructuredOutput", "input": plan}]
    if "The analysis of this task was not sufficient" in system:
        if f"The human's answer: {ANSWER}" in request.prompt:
            analysis = {"complexity": "low", "plan": "Write blue.", "sufficient": True}
            return [{"tool": "StructuredOutput", "input": {"resolved": True, "analysis": analysis}}]
        question = {"resolved": False, "question": "Which colour should colour.txt say?"}
        return [{"tool": "StructuredOutput", "input": question}]
    if "You implement one task" in system:
        command = "echo blue > colour.txt && git add colour.txt && git commit -qm 'colour: blue'"
        return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
    if reviewing:
        return [{"tool": "Read", "input": {"file_path": ".forge/review.diff"}}]
    return [{"text": f"unexpected: {request.prompt[:100]}"}]


@pytest.mark.claude
def test_a_question_answered_on_the_forge_board_lets_the_task_land(
    tmp_path: Path, open_page: OpenPage
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    created = fks("forge", "create", "colour", "--description", "Write the colour", cwd=repo)
    task = created.stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    with FakeAnthropic(responder=clarifying_team) as fake:
        env = isolated_environ(fake.env(tmp_path / "claude"))
        first = fks("forge", "run", cwd=repo, env=env, timeout=300)
        assert first.code == 1, first.output  # the task waits for an answer
        with serve(repo, env=env) as server:
            page = open_page(server)
            answer_on_the_board(page, task)
        second = fks("forge", "run", cwd=repo, env=env, timeout=300)
    assert second.code == 0, second.output
    assert (repo / "colour.txt").read_text() == "blue\n"
    assert git(repo, "log", "-1", "--format=%s") == "colour: blue"
    with serve(repo, env=env) as server:
        page = open_page(server)
        page.goto("/forge")
        expect(page.page.get_by_role("region", name="landed")).to_contain_text(task)
        page.screenshot("landed")
        page.assert_clean()


def answer_on_the_board(page: Watched, task: str) -> None:
    """From the runs page to the forge board; the task waits there with its question, and
    the answer typed in its form is recorded."""
    tab = page.page
    tab.get_by_role("navigation").get_by_role("link", name="forge").click()
    waiting = tab.get_by_role("region", name="waiting for an answer")
    card = waiting.locator(f"article[id='{task}']")
    expect(card).to_contain_text("Which colour should colour.txt say?")
    page.screenshot("question")
    card.locator("textarea[name=answer]").fill(ANSWER)
    card.get_by_role("button", name="Answer").click()
    expect(tab.locator(f"article[id='{task}']")).to_contain_text(ANSWER)
    page.screenshot("answered")
    page.assert_clean()
