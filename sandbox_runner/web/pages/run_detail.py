"""The run page (`/runs/{project}/{run_id}`: the header, a timeline of its steps and iterations,
each step's branch with its commits, diffstat and highlighted patch) and the page of one
iteration (`…/steps/{n}/iterations/{k}`: its log made readable, its egress refusals; `?raw=1`
the log as plain text that no browser renders)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from datetime import datetime
from typing import BinaryIO

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sandbox_runner.commands.runs import run_status, step_status
from sandbox_runner.records.record import IterationRecord, RunRecord, StepRecord, now
from sandbox_runner.records.store import RunStore
from sandbox_runner.records.timing import running_seconds
from sandbox_runner.web.branch import branch_views
from sandbox_runner.web.cache import open_log
from sandbox_runner.web.logview import LogView, read_log
from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import render
from sandbox_runner.web.timeline import LEGEND, outcome, timeline

_CHUNK = 64 * 1024
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class _NotFound(Exception):
    """What the URL names does not exist; the message says what."""


def _record(request: Request) -> tuple[int, RunStore, RunRecord]:
    sources: Sources = request.app.state.sources
    project: int = request.path_params["project"]
    run_id: str = request.path_params["run_id"]
    if not 0 <= project < len(sources.projects):
        raise _NotFound(f"no project {project} here; the runs page lists what fks ui shows")
    if not _RUN_ID.fullmatch(run_id):
        raise _NotFound("that is not a run id")
    store = sources.store_of(project)
    # As the runs list reads it: a link, a FIFO, a file over the size limit or no run record
    # at all is no run.
    record = sources.cache.run(store, run_id)
    if record is None:
        raise _NotFound(f"run '{run_id}' has no record in {store.root} that fks ui can read")
    return project, store, record


def _in(sources: Sources, project: int) -> str:
    """` --cwd DIR` when fks ui shows more than one project."""
    if len(sources.projects) < 2:
        return ""
    return f" --cwd {shlex.quote(str(sources.projects[project]))}"


def _base(request: Request, project: int, record: RunRecord) -> str:
    """The run page's path, which its iteration pages' paths extend."""
    return str(request.app.url_path_for("run", project=project, run_id=record.id))


def _seconds(start: datetime, end: datetime | None) -> float:
    return max(((end or now()) - start).total_seconds(), 0.0)


def _took(it: IterationRecord) -> float:
    return _seconds(it.started, it.ended)


def _missing(request: Request, message: str) -> Response:
    return render(request, "missing.html", status_code=404, message=message, terminal="fks runs")


def run_page(request: Request) -> Response:
    try:
        project, store, record = _record(request)
    except _NotFound as exc:
        return _missing(request, str(exc))
    state = run_status(record)
    sources: Sources = request.app.state.sources
    return render(
        request,
        "run.html",
        project=project,
        record=record,
        state=state,
        seconds=running_seconds(record.pauses, record.started, record.ended or now()),
        base=_base(request, project, record),
        chart=timeline(record),
        legend=LEGEND,
        branches=branch_views(record, store.project),
        step_status=step_status,
        outcome=outcome,
        took=_took,
        live=f"run:{project}:{record.id}",
        terminal=f"fks show {record.id}{_in(sources, project)}",
        review=f"fks review {record.id} --diff{_in(sources, project)}",
    )


def _iteration(record: RunRecord, n: int, k: int) -> tuple[StepRecord, IterationRecord]:
    step = next((s for s in record.steps if s.index == n), None)
    if step is None:
        raise _NotFound(f"run {record.id} has no step {n}")
    found = [it for it in step.iterations if it.number == k]
    if not found:
        raise _NotFound(f"step {n} of run {record.id} has no iteration {k}")
    return step, found[-1]  # a retried attempt after a back-off has the same number


def _neighbours(step: StepRecord, k: int) -> tuple[int | None, int | None]:
    """The numbers of the iterations before and after iteration `k` of `step`."""
    numbers = sorted({it.number for it in step.iterations})
    at = numbers.index(k)
    return (numbers[at - 1] if at else None), (numbers[at + 1] if at + 1 < len(numbers) else None)


def iteration_page(request: Request) -> Response:
    try:
        project, store, record = _record(request)
        step, it = _iteration(record, request.path_params["step"], request.path_params["k"])
    except _NotFound as exc:
        return _missing(request, str(exc))
    # A regular file in the run's folder, reached without a link, or no log.
    log = open_log(store, record.id, it.log) if it.log else None
    if request.query_params.get("raw"):
        return _raw(request, log)
    view = LogView(missing=True) if log is None else read_log(log, claude=it.claude is not None)
    sources: Sources = request.app.state.sources
    where = _in(sources, project)
    return render(
        request,
        "iteration.html",
        project=project,
        record=record,
        state=run_status(record),
        step=step,
        it=it,
        numbers=_neighbours(step, it.number),
        outcome=outcome(it),
        took=_took(it),
        base=_base(request, project, record),
        log=view,
        network_terminal=f"fks show {record.id} --network{where}",
        live=f"run:{project}:{record.id}",
        terminal=f"fks logs {record.id} {step.index} --iteration {it.number}{where}",
        raw_terminal=f"fks logs {record.id} {step.index} --iteration {it.number} --raw{where}",
    )


def _raw(request: Request, stream: BinaryIO | None) -> Response:
    """The log's bytes as plain text, shown inline, never sniffed as anything else: as much of
    it as there is when asked (a running iteration's log goes on growing). `stream` is closed
    by `_chunks`."""
    if stream is None:
        return _missing(request, "this iteration has no log")
    size = os.fstat(stream.fileno()).st_size
    headers = {"content-disposition": "inline", "content-length": str(size)}
    return StreamingResponse(
        _chunks(stream, size), media_type="text/plain; charset=utf-8", headers=headers
    )


def _chunks(stream: BinaryIO, size: int) -> Iterator[bytes]:
    with stream:
        while size > 0 and (chunk := stream.read(min(size, _CHUNK))):
            size -= len(chunk)
            yield chunk


routes = [
    Route("/runs/{project:int}/{run_id}", run_page, name="run"),
    Route(
        "/runs/{project:int}/{run_id}/steps/{step:int}/iterations/{k:int}",
        iteration_page,
        name="iteration",
    ),
]
