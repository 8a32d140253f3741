"""The run page and the iteration pages of the real `fks ui` read a run's record and logs as
the runs list does: a link is not followed (a run's folder, its run.json, a log), a FIFO is not
waited on, a run.json over 64 MiB is not read. Each such page answers at once, and requests for
45 FIFOs (more than the server's worker threads) leave every other page answering."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fks_testing.helpers import init_repo
from fks_testing.records import make_run, save_run
from fks_testing.webui import UiServer, ui_server

FINE = "20261101-090000-0001"
SECRET = "chain-read-through-a-link"


def hostile_runs(tmp_path: Path) -> Path:
    """A project whose runs are each one way to make the run page follow or wait."""
    project = init_repo(tmp_path / "repo")
    runs = project / ".forge" / "runs"
    elsewhere = save_run(tmp_path / "elsewhere", make_run("linked-dir", chain=SECRET)).parent
    (runs / "linked-dir").parent.mkdir(parents=True)
    (runs / "linked-dir").symlink_to(elsewhere, target_is_directory=True)
    outside = tmp_path / "outside.json"
    outside.write_text(make_run("linked-record", chain=SECRET).model_dump_json())
    (runs / "linked-record").mkdir()
    (runs / "linked-record" / "run.json").symlink_to(outside)
    for n in range(45):
        (runs / f"fifo-{n}").mkdir()
        os.mkfifo(runs / f"fifo-{n}" / "run.json")
    (runs / "huge").mkdir()
    with (runs / "huge" / "run.json").open("w") as handle:
        handle.write(make_run("huge", chain=SECRET).model_dump_json()[:-1])
        handle.write(', "reason": "' + " " * (65 << 20) + '"}')
    # A readable run whose first log is a FIFO and whose second log's folder is a link.
    save_run(project, make_run(FINE))
    (runs / FINE / "01-builder").mkdir()
    os.mkfifo(runs / FINE / "01-builder" / "001.log")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "002.log").write_text(SECRET)
    (runs / FINE / "01-builder" / "002.log").symlink_to(tmp_path / "logs" / "002.log")
    return project


def test_the_run_page_follows_no_link_and_waits_on_no_fifo(tmp_path: Path) -> None:
    project = hostile_runs(tmp_path)
    with ui_server(cwd=project) as ui, ui.client(timeout=10) as client:
        for run_id in ("linked-dir", "linked-record", "huge", "fifo-0"):
            page = client.get(f"/runs/0/{run_id}")
            assert page.status_code == 404, (run_id, page.text[:300])
            assert "has no record" in page.text and SECRET not in page.text
        for k in (1, 2):
            base = f"/runs/0/{FINE}/steps/1/iterations/{k}"
            page = client.get(base)
            assert page.status_code == 200 and SECRET not in page.text
            raw = client.get(f"{base}?raw=1")
            assert raw.status_code == 404 and "has no log" in raw.text
        with ThreadPoolExecutor(45) as pool:
            answers = list(pool.map(lambda n: _status(ui, f"/runs/0/fifo-{n}"), range(45)))
        assert answers == [404] * 45
        listing = client.get("/")
        assert listing.status_code == 200 and FINE in listing.text


def _status(ui: UiServer, path: str) -> int:
    with ui.client(timeout=10) as client:
        return client.get(path).status_code
