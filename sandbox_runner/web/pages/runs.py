"""The runs page: every run, newest first, with filters and totals."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import render


async def runs_page(request: Request) -> Response:
    sources: Sources = request.app.state.sources
    runs = sources.runs()
    return render(request, "runs.html", runs=runs, sources=sources, terminal="fks runs")


routes = [Route("/", runs_page, name="runs")]
