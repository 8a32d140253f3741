"""An iteration's log made readable for a page: a Claude transcript as messages, tool calls and
their results (as `fks logs` renders it), other output with its terminal colours turned into CSS
classes and every other escape, control and bidi character neutralised. Only the first
`LOG_BYTES` of a log are read; the page says what was left out."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_runner.ui.ansi import strip_escapes
from sandbox_runner.ui.lines import LINE_BYTES, bounded_lines
from sandbox_runner.ui.output import AGENT_PREFIX
from sandbox_runner.ui.transcript import TranscriptRenderer, is_transcript

LOG_BYTES = 2 << 20
"""Bytes of a log read for its page (the raw log has all of it)."""
EVENT_BYTES = 1 << 20
"""Bytes of one stream-json event read for rendering."""

_SGR = re.compile(r"\x1b\[([0-9;]{0,32})m")
_COLOURS = {**{30 + n: f"fg{n}" for n in range(8)}, **{90 + n: f"fg{n}" for n in range(8)}}


@dataclass(frozen=True)
class Segment:
    text: str
    css: str = ""


@dataclass(frozen=True)
class LogLine:
    kind: str
    """agent (what the agent wrote), tool (a call), result (a tool's result), meta (fks's)."""
    segments: tuple[Segment, ...]


@dataclass
class LogView:
    transcript: bool = False
    lines: list[LogLine] = field(default_factory=list)
    unread: int = 0
    """Bytes of the log past `LOG_BYTES`, not shown here."""
    missing: bool = False


def read_log(path: Path, *, claude: bool) -> LogView:
    """The log at `path` (a Claude session's if `claude`, or if its first line says so)."""
    view = LogView()
    try:
        stream = path.open("rb")
    except FileNotFoundError:
        view.missing = True
        return view
    with stream:
        size = os.fstat(stream.fileno()).st_size
        renderer: TranscriptRenderer | None = None
        first = True
        for raw, cut in bounded_lines(stream, EVENT_BYTES):
            # As `fks logs`: a Claude step's log is its stream-json, whatever its first event.
            if first and (is_transcript(raw) or (claude and raw.startswith(b"{"))):
                renderer = TranscriptRenderer()
            first = False
            view.lines += _transcript(renderer, raw, cut) if renderer else [_plain(raw, cut)]
            if stream.tell() >= LOG_BYTES:
                break
        view.unread = max(size - stream.tell(), 0)
    view.transcript = renderer is not None
    return view


def _transcript(renderer: TranscriptRenderer, raw: bytes, cut: int) -> list[LogLine]:
    return [_classified(line) for line in renderer.lines(raw, cut)]


def _classified(line: str) -> LogLine:
    if line.startswith(AGENT_PREFIX):
        return LogLine("agent", (Segment(line.removeprefix(AGENT_PREFIX)),))
    if line.startswith("→ "):
        return LogLine("tool", (Segment(line),))
    if line.startswith("  "):
        return LogLine("result", (Segment(line),))
    return LogLine("meta", (Segment(line),))


def _plain(raw: bytes, cut: int) -> LogLine:
    if len(raw) > LINE_BYTES:
        raw, cut = raw[:LINE_BYTES], cut + len(raw) - LINE_BYTES
    segments = coloured(raw.decode("utf-8", "replace"))
    if cut:
        segments.append(Segment(f"… ({cut} more bytes not shown)", "cut"))
    return LogLine("agent", tuple(segments))


def coloured(text: str) -> list[Segment]:
    """`text` in pieces, each with the CSS classes of the colours its SGR escapes gave it; the
    text of each piece is neutralised (no escape, control or bidi character is left)."""
    segments: list[Segment] = []
    colour: str | None = None
    bold = False
    at = 0
    for match in _SGR.finditer(text):
        _add(segments, text[at : match.start()], colour, bold)
        at = match.end()
        for part in match.group(1).split(";") or ["0"]:
            code = int(part) if part.isdigit() else 0
            if code == 0:
                colour, bold = None, False
            elif code == 1:
                bold = True
            elif code == 22:
                bold = False
            elif code == 39:
                colour = None
            elif code in _COLOURS:
                colour = _COLOURS[code]
    _add(segments, text[at:], colour, bold)
    return segments


def _add(segments: list[Segment], text: str, colour: str | None, bold: bool) -> None:
    clean = strip_escapes(text, keep="\t")
    if clean:
        css = " ".join(c for c in (colour, "bold" if bold else None) if c)
        segments.append(Segment(clean, css))
