"""The forge page of `fks ui` (to be written)."""

from __future__ import annotations

from starlette.routing import Route

routes: list[Route] = []
