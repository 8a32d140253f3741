"""The `fks ui` application: Starlette routes from each page module, the guard, the templates
and the packaged static files."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sandbox_runner.web.pages import board, live, run_detail, run_list
from sandbox_runner.web.security import Guard, GuardMiddleware
from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import STATIC_DIR


def create_app(sources: Sources, guard: Guard) -> Starlette:
    """The app for `sources`, answering only what `guard` allows."""
    routes = [
        *run_list.routes,
        *run_detail.routes,
        *board.routes,
        *live.routes,
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
        # Where a browser looks for an icon on a page that names none (a raw log).
        Route("/favicon.ico", _favicon),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", guard.name]),
            Middleware(GuardMiddleware, guard=guard),
        ],
    )
    app.state.sources = sources
    return app


async def _favicon(request: Request) -> FileResponse:
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
