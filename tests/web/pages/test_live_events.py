"""Live updates of `fks ui` (`/events?topic=…`, server-sent events) from the real `fks ui`: a
`changed` event when the records behind a topic change, topics that name nothing, the
heartbeat, the bound on open streams."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fks_testing.helpers import init_repo
from fks_testing.records import make_run, save_run, touch_later
from fks_testing.webui import UiServer, ui_server

from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.web.pages.live import HEARTBEAT, MAX_STREAMS, watcher
from sandbox_runner.web.sources import Sources

RUN = "20261101-090000-abcd"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    save_run(path, make_run(RUN))
    return path


@pytest.fixture
def ui(repo: Path) -> Iterator[UiServer]:
    with ui_server(cwd=repo) as server:
        yield server


@contextlib.contextmanager
def stream(client: httpx.Client, topic: str, since: str | None = None) -> Iterator[Iterator[str]]:
    """The lines of the topic's stream, once it is open (its first look at the files done:
    a comment line the test asks for with `since` far in the future would not come, so the
    open is proven by the status line and headers)."""
    params = {"topic": topic, **({"since": since} if since is not None else {})}
    with client.stream("GET", "/events", params=params) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        yield answer.iter_lines()


def next_event(lines: Iterator[str]) -> str:
    return next(line for line in lines if line.startswith("event:"))


def opened(lines: Iterator[str]) -> Iterator[str]:
    """`lines` once the watcher has taken its first look (`since=0` makes it say so)."""
    assert next_event(lines) == "event: changed"
    return lines


def test_a_new_run_is_announced_on_the_runs_topic(repo: Path, ui: UiServer) -> None:
    with ui.client() as client, stream(client, "runs", since="0") as lines:
        opened(lines)
        save_run(repo, make_run("20261101-100000-beef"))
        assert next_event(lines) == "event: changed"


def test_a_run_changing_is_announced_on_its_topic(repo: Path, ui: UiServer) -> None:
    with ui.client() as client, stream(client, f"run:0:{RUN}", since="0") as lines:
        opened(lines)
        log = repo / ".forge" / "runs" / RUN / "01-builder" / "001.log"
        log.parent.mkdir(parents=True)
        log.write_text("a line of output\n")  # a log growing counts as well as run.json
        assert next_event(lines) == "event: changed"
        touch_later(repo / ".forge" / "runs" / RUN / "run.json")
        assert next_event(lines) == "event: changed"


def test_the_backlog_changing_is_announced_on_the_forge_topic(repo: Path, ui: UiServer) -> None:
    task = repo / "forge" / "tasks" / "t1.md"
    task.parent.mkdir(parents=True)
    task.write_text("# a task\n")
    with ui.client() as client, stream(client, "forge", since="0") as lines:
        opened(lines)
        WorkStore(repo).write(WorkItem(task_id="t1", title="a task"))
        assert next_event(lines) == "event: changed"


def test_a_change_before_the_stream_opened_is_sent_at_once(repo: Path, ui: UiServer) -> None:
    """The page was loaded at `since`; a run written after that and before the stream opened
    is announced as soon as it opens."""
    loaded_ms = int(time.time() * 1000) - 60_000
    save_run(repo, make_run("20261101-110000-cafe"))
    with ui.client() as client, stream(client, "runs", since=str(loaded_ms)) as lines:
        assert next_event(lines) == "event: changed"


@pytest.mark.parametrize(
    "topic",
    ["", "nothing", "run:0:no-such-run", "run:1:" + RUN, "run:0:../../etc", "run:x:" + RUN],
)
def test_a_topic_that_names_nothing_is_one_line(ui: UiServer, topic: str) -> None:
    with ui.client() as client:
        answer = client.get("/events", params={"topic": topic})
    assert answer.status_code == 404
    assert answer.text.startswith("fks ui: no live topic") and "\n" not in answer.text.strip()


def test_the_stream_needs_the_token(ui: UiServer) -> None:
    answer = httpx.get(f"{ui.base}/events", params={"topic": "runs"}, timeout=60)
    assert answer.status_code == 403


def test_a_quiet_stream_has_a_heartbeat(ui: UiServer) -> None:
    started = time.monotonic()
    with ui.client(timeout=HEARTBEAT * 6) as client, stream(client, "runs") as lines:
        comment = next(line for line in lines if line.startswith(":"))
    assert comment.startswith(": ping")
    assert time.monotonic() - started >= HEARTBEAT / 2  # not an event: the heartbeat


def test_open_streams_are_bounded(ui: UiServer) -> None:
    with ui.client() as client, contextlib.ExitStack() as streams:
        # Kept: an iterator of lines dropped would close its connection.
        kept = [
            opened(streams.enter_context(stream(client, "runs", since="0")))
            for _ in range(MAX_STREAMS)
        ]
        refused = client.get("/events", params={"topic": "runs"})
        assert refused.status_code == 503
        assert refused.text.startswith(f"fks ui: {MAX_STREAMS} live pages are open already")
        assert client.get("/").status_code == 200  # the pages themselves still answer
        assert len(kept) == MAX_STREAMS
    # Streams closed by their pages free their places (the server notices the disconnect).
    with ui.client() as client:
        deadline = time.monotonic() + 60
        while (answer := _probe(client)) == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer == 200


def _probe(client: httpx.Client) -> int:
    with client.stream("GET", "/events", params={"topic": "runs"}) as answer:
        return answer.status_code


def test_the_watcher_follows_no_link(tmp_path: Path) -> None:
    """Links an agent could leave in the project (a task folder, work items, a run's record, a
    step folder) lead the watcher nowhere: what they point to is not looked at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "task-1.md").write_text("# elsewhere\n")
    (outside / "run.json").write_text("{}")
    project = init_repo(tmp_path / "repo")
    (project / "forge").mkdir()
    (project / "forge" / "tasks").symlink_to(outside)
    (project / ".forge").mkdir()
    (project / ".forge" / "work").symlink_to(outside)
    save_run(project, make_run(RUN))
    run_dir = project / ".forge" / "runs" / RUN
    (run_dir / "01-builder").symlink_to(outside)
    linked = project / ".forge" / "runs" / "20261101-100000-link"
    linked.mkdir()
    (linked / "run.json").symlink_to(outside / "run.json")
    sources = Sources((project,))
    assert watcher(sources, "forge")() == frozenset()
    assert {path for path, _, _ in watcher(sources, "runs")()} == {f"0/runs/{RUN}/run.json"}
    assert {path for path, _, _ in watcher(sources, f"run:0:{RUN}")()} == {"run/run.json"}
