"""The runs page of `fks ui`: filters, totals, paging, the status `fks runs` shows, the project
of each run with `--all`, records that change or are hostile."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fks_testing.records import START, make_run, many_runs, save_run, touch_later
from starlette.testclient import TestClient

from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.outcomes import Status
from sandbox_runner.records.record import RunOptions
from sandbox_runner.records.store import RunStore
from sandbox_runner.web.app import create_app
from sandbox_runner.web.pages.run_list import PAGE_SIZE
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

PORT = 8765


def client_for(sources: Sources) -> Iterator[TestClient]:
    guard = Guard(token="t0ken", port=PORT, name="fks-test.localhost")
    with TestClient(create_app(sources, guard), base_url=guard.origin) as client:
        assert client.get("/?token=t0ken").status_code == 200  # now it has the cookie
        yield client


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


@pytest.fixture
def client(project: Path) -> Iterator[TestClient]:
    yield from client_for(Sources((project,)))


def run_ids(page: str) -> list[str]:
    """The run ids of the table's rows, in order."""
    return re.findall(r'<a href="/runs/\d+/[^"]*"><code>([^<]*)</code>', page)


def totals(page: str) -> dict[str, str]:
    found = re.search(r'<p class="totals">(.*?)</p>', page, re.S)
    assert found, page
    pairs = re.findall(r"<strong>([^<]*)</strong> (\w+)", found.group(1))
    return {name: value for value, name in pairs}


def four_runs(project: Path) -> None:
    """Complete (landed), failed, running with its process gone (died), incomplete."""
    day = timedelta(days=1)
    save_run(project, make_run("r1-done", started=START, chain="ralph", merged=True, cost=0.5))
    save_run(project, make_run("r2-fail", started=START + day, status="failed", chain="review"))
    save_run(project, make_run("r3-dead", started=START + 2 * day, status="running"))
    save_run(project, make_run("r4-inc", started=START + 3 * day, status="incomplete"))


def test_runs_newest_first_with_the_status_fks_runs_shows(
    project: Path, client: TestClient
) -> None:
    four_runs(project)
    page = client.get("/").text
    assert run_ids(page) == ["r4-inc", "r3-dead", "r2-fail", "r1-done"]
    assert 'href="/runs/0/r1-done"' in page
    assert client.get("/runs/0/r1-done").status_code == 200  # the run's own page
    rows = dict(re.findall(r"<code>([^<]*)</code>.*?status-(\w+)", page, re.S))
    assert rows == {
        "r4-inc": "incomplete",
        "r3-dead": "died",
        "r2-fail": "failed",
        "r1-done": "complete",
    }
    # cost: 2 iterations each; r1 at $0.50, the others at $0.01
    assert totals(page) == {"runs": "4", "landed": "1", "failed": "2", "cost": "$1.06"}
    assert "In a terminal: <code" in page and "fks runs</code>" in page


def test_filters_by_status_and_totals_follow(project: Path, client: TestClient) -> None:
    four_runs(project)
    page = client.get("/", params=[("status", "died"), ("status", "complete")]).text
    assert run_ids(page) == ["r3-dead", "r1-done"]
    assert totals(page) == {"runs": "2", "landed": "1", "failed": "1", "cost": "$1.02"}
    assert re.search(r'value="died" checked', page)
    assert "fks runs --status complete,died" in page


def test_filters_by_dates_the_last_day_included(project: Path, client: TestClient) -> None:
    four_runs(project)
    since = (START + timedelta(days=1)).astimezone().date().isoformat()
    until = (START + timedelta(days=2)).astimezone().date().isoformat()
    page = client.get("/", params={"from": since, "to": until}).text
    assert run_ids(page) == ["r3-dead", "r2-fail"]
    assert totals(page)["runs"] == "2"
    assert f'name="from" value="{since}"' in page


def test_filters_by_part_of_the_chain(project: Path, client: TestClient) -> None:
    four_runs(project)
    page = client.get("/", params={"chain": "REV"}).text
    assert run_ids(page) == ["r2-fail"]
    assert '<option value="ralph">' in page  # the chains to choose from
    nothing = client.get("/", params={"chain": "none-such"}).text
    assert run_ids(nothing) == [] and "No run matches these filters." in nothing


def test_a_wrong_filter_is_one_line_and_the_rest_applies(project: Path, client: TestClient) -> None:
    four_runs(project)
    answer = client.get("/", params={"from": "yesterday", "status": "failed"})
    assert answer.status_code == 400
    errors = re.findall(r'<p class="error">([^<]*)</p>', answer.text)
    assert [html.unescape(e) for e in errors] == [
        "from 'yesterday': give a date as YYYY-MM-DD (from 1970 to 9998)"
    ]
    assert run_ids(answer.text) == ["r2-fail"]


@pytest.mark.parametrize(
    "params",
    [
        {"to": "9999-12-31"},
        {"from": "0001-01-01"},
        {"page": "9" * 5000},
        {"page": "0"},
        {"status": "x" * 5000},
    ],
    ids=["last-date", "first-date", "long-page", "page-0", "long-status"],
)
def test_extreme_filters_are_one_line_each(
    project: Path, client: TestClient, params: dict[str, str]
) -> None:
    four_runs(project)
    answer = client.get("/", params=params)
    assert answer.status_code == 400
    (error,) = re.findall(r'<p class="error">([^<]*)</p>', answer.text)
    assert len(error) < 300
    assert len(run_ids(answer.text)) == 4


def test_pages_of_runs_with_totals_over_all(project: Path, client: TestClient) -> None:
    count = 2 * PAGE_SIZE + 30
    many_runs(project, count)
    first = client.get("/").text
    assert len(run_ids(first)) == PAGE_SIZE
    assert totals(first)["runs"] == str(count)
    assert f"runs 1–{PAGE_SIZE} of {count} (page 1 of 3)" in first
    last = client.get("/", params={"page": "3"}).text
    assert len(run_ids(last)) == 30
    assert run_ids(last)[-1] == "20261101-000000-0000"  # the oldest
    assert 'rel="prev" href="?page=2"' in last
    complete = client.get("/", params={"status": "complete"}).text  # half of them
    assert 'rel="next" href="?status=complete&amp;page=2"' in complete
    assert totals(complete)["runs"] == str(count // 2)


def test_a_record_that_changes_is_shown_as_it_is_now(project: Path, client: TestClient) -> None:
    record = make_run("r1", status="running", pid=os.getpid())
    path = save_run(project, record)
    assert "status-running" in client.get("/").text
    record.status, record.ended = Status.COMPLETE, START + timedelta(hours=1)
    save_run(project, record)
    touch_later(path)
    assert "status-complete" in client.get("/").text
    save_run(project, make_run("r2", started=START + timedelta(hours=2)))
    assert run_ids(client.get("/").text) == ["r2", "r1"]
    RunStore(project).discard("r2")
    assert run_ids(client.get("/").text) == ["r1"]


def test_every_project_names_its_runs(tmp_path: Path) -> None:
    one, two = tmp_path / "alpha", tmp_path / "beta"
    save_run(one, make_run("a-run"))
    save_run(two, make_run("b-run", started=START + timedelta(hours=1)))
    for client in client_for(Sources((one, two), every=True)):
        page = client.get("/").text
    assert run_ids(page) == ["b-run", "a-run"]
    assert re.search(r'href="/runs/1/b-run".*?<td title="[^"]*beta">beta</td>', page, re.S)
    assert re.search(r'href="/runs/0/a-run".*?<td title="[^"]*alpha">alpha</td>', page, re.S)


def test_what_an_agent_wrote_is_inert_text(project: Path, client: TestClient) -> None:
    chain = '<script>window.pwned=1</script><img src=x onerror="pwned=1">\x1b[31m\u202e'
    save_run(project, make_run("r1", chain=chain))
    page = client.get("/", params={"chain": "<script>"}).text
    assert "<script>window" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page
    assert "\x1b" not in page and "\u202e" not in page
    assert run_ids(page) == ["r1"]


def test_records_the_page_does_not_follow_or_read(project: Path, client: TestClient) -> None:
    """A run.json that is a link, a FIFO or too large is not a run (and nothing hangs)."""
    outside = project.parent / "elsewhere.json"
    outside.write_text(make_run("linked").model_dump_json())
    runs = project / ".forge" / "runs"
    for name in ("linked", "fifo", "huge"):
        (runs / name).mkdir(parents=True)
    (runs / "linked" / "run.json").symlink_to(outside)
    os.mkfifo(runs / "fifo" / "run.json")
    with (runs / "huge" / "run.json").open("w") as handle:
        handle.write(make_run("huge").model_dump_json()[:-1])
        handle.write(', "reason": "' + " " * (65 << 20) + '"}')
    save_run(project, make_run("fine"))
    assert run_ids(client.get("/").text) == ["fine"]


def test_without_runs_it_says_how_to_make_one(client: TestClient) -> None:
    page = client.get("/").text
    assert "No runs recorded here yet" in page
    assert totals(page) == {"runs": "0", "landed": "0", "failed": "0", "cost": "$0.0000"}


def test_the_page_updates_live(client: TestClient) -> None:
    assert 'data-live="runs"' in client.get("/").text


def test_started_times_are_shown_local(project: Path, client: TestClient) -> None:
    moment = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
    save_run(project, make_run("r1", started=moment))
    assert moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") in client.get("/").text


def test_a_forge_task_whose_work_landed_counts_as_landed(project: Path, client: TestClient) -> None:
    """As `fks runs` counts: a forge run landed when its task's work reached the base (its
    stages' merges into the task's branch do not count); an incomplete run never did, even
    when its first step was merged."""
    record = make_run("r1", merged=True)
    record.options = RunOptions(forge_task="t1")
    save_run(project, record)
    save_run(
        project,
        make_run("r2", started=START + timedelta(hours=1), status="incomplete", merged=True),
    )
    assert totals(client.get("/").text)["landed"] == "0"
    item = WorkItem(task_id="t1", title="Add <b>it</b>", status="completed", runs=["r1"])
    item.merge_commit = "a" * 40
    WorkStore(project).write(item)
    page = client.get("/").text
    assert totals(page)["landed"] == "1"
    assert "forge t1 Add &lt;b&gt;it&lt;/b&gt;" in page  # the task's title, escaped
