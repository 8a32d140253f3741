"""The Jinja2 templates and packaged static files of `fks ui`, and the filters that make what
an agent wrote safe to show: autoescaping everywhere, and terminal escapes, control and bidi
characters neutralised before escaping (as `fks show` does on a terminal)."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from sandbox_runner.console import units
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.lines import clip
from sandbox_runner.outcomes import IterationEnd, Status, WorkStatus

STATIC_DIR = Path(__file__).parent / "static"
TEXT_LIMIT = 2000  # characters of one agent-written string shown in a list or a title


def agent_text(value: object, limit: int = TEXT_LIMIT) -> str:
    """Agent-written text for a page: escapes, controls and bidi neutralised, cut at `limit`
    (autoescaping then makes it HTML-safe)."""
    return clip(strip_escapes(str(value)), limit)


def usd(value: float | None) -> str:
    """A cost as the terminal shows it (`console.units.usd`); `-` when there is none."""
    return "-" if value is None else units.usd(value)


def byte_count(value: int, *, more: bool = False, unit: bool = True) -> str:
    """A number of bytes as the terminal shows it (`console.units.byte_count`)."""
    return units.byte_count(value, more=more, unit=unit)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("sandbox_runner.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters |= {"agent": agent_text, "usd": usd, "duration": duration, "when": when}
    env.globals |= {"Status": Status, "IterationEnd": IterationEnd, "WorkStatus": WorkStatus}
    env.filters |= {
        "bytes": byte_count,
        "more_bytes": partial(byte_count, more=True),
        "byte_number": partial(byte_count, unit=False),
    }
    return env


_TEMPLATES: Jinja2Templates | None = None


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """`template` with `context` (give `terminal`: the command that does the same in a
    terminal, shown on every page), `request` and `url_for`."""
    global _TEMPLATES
    if _TEMPLATES is None:
        _TEMPLATES = Jinja2Templates(env=environment())
    return _TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)
