"""Text an agent wrote, made safe to print as part of one line of fks's output."""

from __future__ import annotations

from sandbox_runner.console.ansi import strip_escapes

MAX_SHOWN = 500


def one_line(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` without escape sequences or controls, bidi controls made visible (`strip_escapes`),
    its lines joined by " / " (so it can never start a line of its own that looks like fks's),
    cut at `limit`."""
    flat = " / ".join(part.strip() for part in strip_escapes(text).splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
