"""`fks ui`: time to serve the runs page with 5,000 runs, and a run page whose step has 1,000
iterations, from the real `fks ui` over HTTP (records generated in a temporary project)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import httpx
from fks_testing.records import make_run, many_runs, save_run
from fks_testing.webui import ui_server

from benches.common import make_repo, timed

RUNS = 5000
ITERATIONS = 1000
TARGET = 0.300  # seconds per page


def _cpu(pid: int) -> float:
    """Seconds of CPU process `pid` has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(client: httpx.Client, path: str, repeat: int, pid: int) -> tuple[str, int]:
    """The first load, the median of `repeat` loads after three more and the server's CPU per
    load, as a table row's cells; and the last status."""
    answer: list[httpx.Response] = []

    def get() -> None:
        answer[:] = [client.get(path)]

    first = timed(get)
    for _ in range(3):
        get()
    cpu = _cpu(pid)
    median = statistics.median(timed(get) for _ in range(repeat))
    per_load = (_cpu(pid) - cpu) / repeat
    verdict = "ok" if median <= TARGET else "MISSED"
    cells = (
        f"{median * 1000:.0f} ms (first load {first * 1000:.0f} ms; server CPU "
        f"{per_load * 1000:.0f} ms a load) | - | - | < 300 ms | {verdict} |"
    )
    return cells, answer[0].status_code


def bench_ui(work: Path, repeat: int) -> list[str]:
    project = make_repo(work / "ui")
    many_runs(project, RUNS - 1)
    big = make_run("20991231-235959-big0", iterations_per_step=ITERATIONS)
    save_run(project, big)
    with ui_server(cwd=project) as ui, ui.client() as client:
        cells, status = _measure(client, "/", repeat, ui.process.pid)
        assert status == 200, f"the runs page answered {status}"
        rows = [f"| ui: the runs page, {RUNS:,} runs | {cells}"]
        cells, status = _measure(client, f"/runs/0/{big.id}", repeat, ui.process.pid)
    if status == 404:
        cells = "- | - | - | < 300 ms | no run page |"
    else:
        assert status == 200, f"the run page answered {status}"
    return [*rows, f"| ui: a run page, a step of {ITERATIONS:,} iterations | {cells}"]
