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
from pathlib import Path
from typing import BinaryIO

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sandbox_runner.errors import FksError
from sandbox_runner.records.store import (
    IterationRecord,
    RunRecord,
    RunStore,
    StepRecord,
    now,
)
from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import render

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
    try:
        return project, store, store.load(run_id)
    except FksError as exc:
        raise _NotFound(str(exc)) from None


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
    from sandbox_runner.commands.runs import run_status, step_status
    from sandbox_runner.web.branch import branch_views
    from sandbox_runner.web.timeline import outcome, timeline

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
        seconds=_seconds(record.started, record.ended),
        base=_base(request, project, record),
        chart=timeline(record),
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


def _log_path(store: RunStore, record: RunRecord, it: IterationRecord) -> Path | None:
    """The iteration's log, if it lies in the run's directory."""
    run_dir = store.run_dir(record.id).resolve()
    if not it.log:
        return None
    path = (run_dir / it.log).resolve()
    return path if path.is_relative_to(run_dir) else None


def iteration_page(request: Request) -> Response:
    from sandbox_runner.commands.runs import run_status
    from sandbox_runner.web.logview import LogView, read_log
    from sandbox_runner.web.timeline import outcome

    try:
        project, store, record = _record(request)
        step, it = _iteration(record, request.path_params["step"], request.path_params["k"])
    except _NotFound as exc:
        return _missing(request, str(exc))
    path = _log_path(store, record, it)
    if request.query_params.get("raw"):
        return _raw(request, path)
    view = LogView(missing=True) if path is None else read_log(path, claude=it.claude is not None)
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


def _raw(request: Request, path: Path | None) -> Response:
    """The log's bytes as plain text, shown inline, never sniffed as anything else: as much of
    it as there is when asked (a running iteration's log goes on growing)."""
    try:
        stream = path.open("rb") if path is not None else None  # closed by _chunks
    except OSError:
        stream = None
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
