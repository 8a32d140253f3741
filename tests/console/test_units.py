"""Costs and byte counts read the same wherever fks shows them: the terminal (`fks runs`,
`fks show`) and `fks ui`'s pages; four decimals under a dollar, two from a dollar up, thousands
grouped."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import fks, init_repo
from fks_testing.records import START, make_run, save_run
from starlette.testclient import TestClient

from sandbox_runner.console.units import byte_count, byte_limit, usd
from sandbox_runner.web.app import create_app
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

SMALL = "20261101-090000-0001"
LARGE = "20261102-090000-0002"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0, "$0.0000"),
        (0.012, "$0.0120"),
        (0.00004, "<$0.0001"),
        (0.99994, "$0.9999"),
        (1.0, "$1.00"),
        (1234.5, "$1,234.50"),
    ],
)
def test_usd(value: float, shown: str) -> None:
    assert usd(value) == shown


def test_byte_counts_and_limits() -> None:
    assert byte_count(1) == "1 byte"
    assert byte_count(8995904, more=True) == "8,995,904 more bytes"
    assert byte_count(90000, unit=False) == "90,000"
    assert (byte_limit(100 << 20), byte_limit(100_000)) == ("100 MiB", "100,000 bytes")


def test_the_terminal_and_the_web_view_show_the_same_costs_and_sizes(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "repo")
    small = make_run(SMALL, cost=0.006)  # two iterations: $0.0120
    small.steps[0].iterations[0].log_dropped = 1_234_567
    log = save_run(project, small).parent / small.steps[0].iterations[0].log
    log.parent.mkdir()
    log.write_text("done\n")
    save_run(project, make_run(LARGE, started=START.replace(day=2), cost=617.25))
    guard = Guard(token="t0ken", port=8765, name="fks-test.localhost")
    with TestClient(create_app(Sources((project,)), guard), base_url=guard.origin) as client:
        assert client.get("/?token=t0ken").status_code == 200
        runs_page = client.get("/").text
        small_page = client.get(f"/runs/0/{SMALL}").text
        iteration_page = client.get(f"/runs/0/{SMALL}/steps/1/iterations/1").text
    listing = fks("runs", cwd=project).stdout
    shown = fks("show", SMALL, cwd=project).stdout
    for text in (runs_page, listing):
        assert "$0.0120" in text and "$1,234.50" in text and "$1,234.51" in text, text
    assert "$0.0120" in small_page and "$0.0120" in shown
    assert "$0.0060" in small_page and "$0.0060" in shown  # each iteration
    assert "1,234,567 bytes of output past the log limit" in iteration_page
    assert "log cut: 1,234,567 bytes of output past the log limit" in shown
