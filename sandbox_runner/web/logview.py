"""An iteration's log made readable for a page: an agent CLI's transcript as messages, tool calls and
their results (as `fks logs` renders it, each call and long result opening to the whole of it
as `fks logs --full` shows it), other output with its terminal colours turned into CSS
classes and every other escape, control and bidi character neutralised. Only the first
`LOG_BYTES` of a log are read; the page says what was left out."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import BinaryIO

from markupsafe import Markup, escape

from sandbox_runner.console.ansi import coloured_pieces
from sandbox_runner.console.lines import LINE_BYTES, bounded_lines
from sandbox_runner.console.output import AGENT_PREFIX
from sandbox_runner.console.transcript import Shown, TranscriptRenderer, is_transcript
from sandbox_runner.console.units import byte_count

LOG_BYTES = 1 << 20
"""Bytes of a log read for its page (the raw log has all of it)."""
EVENT_BYTES = 1 << 20
"""Bytes of one stream-json event read for rendering."""

_HEAD_LINES = 8
"""Lines of a log looked at for the first event of an agent CLI's stream."""
_COLOURS = {**{30 + n: f"fg{n}" for n in range(8)}, **{90 + n: f"fg{n}" for n in range(8)}}


@dataclass
class LogView:
    transcript: bool = False
    session: str = "Claude"
    """Whose session a transcript is (`Codex`, `Gemini CLI`, …)."""
    html: Markup = field(default_factory=Markup)
    """The lines, each a `<span class="l-KIND">` (agent: what the agent wrote; tool: a call;
    result: a tool's result; meta: the session's own lines), escaped."""
    unread: int = 0
    """Bytes of the log past `LOG_BYTES`, not shown here."""
    missing: bool = False


def read_log(stream: BinaryIO, *, claude: bool) -> LogView:
    """The log read from `stream`, which it closes (an agent CLI's session's if `claude`: the
    iteration has its CLI's stats, or if its first line says so)."""
    view = LogView()
    out: list[str] = []
    with stream:
        size = os.fstat(stream.fileno()).st_size
        lines = bounded_lines(stream, EVENT_BYTES)
        head = list(itertools.islice(lines, _HEAD_LINES))
        renderer = TranscriptRenderer() if _is_session(head, claude=claude) else None
        read = 0
        for raw, cut in itertools.chain(head, lines):
            read += len(raw) + cut + 1
            if renderer is not None:
                out += [_shown_html(item) for item in renderer.shown(raw, cut)]
            else:
                out.append(_plain(raw, cut))
            if read >= LOG_BYTES:
                break
        view.unread = max(size - read, 0)
    view.transcript = renderer is not None
    view.session = renderer.cli.title if renderer is not None and renderer.cli else "Claude"
    view.html = Markup("".join(out))  # every piece escaped by _line
    return view


def _is_session(head: list[tuple[bytes, int]], *, claude: bool) -> bool:
    """Whether a log beginning with `head` is an agent CLI's stream: as `fks logs`, a Claude
    step's log is whatever its first event; another CLI's may begin with lines of its stderr
    before its first event."""
    if not head:
        return False
    first = head[0][0]
    return (claude and first.startswith(b"{")) or any(is_transcript(raw) for raw, _ in head)


def _line(kind: str, html: str) -> str:
    return f'<span class="l-{kind}">{html}</span>\n'


def _shown_html(item: Shown) -> str:
    """A transcript's item; a tool call opens to its whole input, a result to all of it (as
    `fks logs --full` shows them), escaped."""
    if not item.whole:
        return "".join(_classified(line) for line in (item.head, *item.more))
    whole = "\n".join(f'<span class="l-whole">    {escape(line)}</span>' for line in item.whole)
    if item.head.startswith("→ "):
        summary = f'<span class="l-tool">{escape(item.head)}</span>'
        return f'<details class="whole"><summary>{summary}</summary>{whole}</details>'
    shown = "".join(_classified(line) for line in (item.head, *item.more))
    summary = '<span class="l-result">    (the whole result)</span>'
    return f'{shown}<details class="whole"><summary>{summary}</summary>{whole}</details>'


def _classified(line: str) -> str:
    if line.startswith(AGENT_PREFIX):
        return _line("agent", escape(line.removeprefix(AGENT_PREFIX)))
    if line.startswith("→ "):
        return _line("tool", escape(line))
    return _line("result" if line.startswith("  ") else "meta", escape(line))


def _plain(raw: bytes, cut: int) -> str:
    if len(raw) > LINE_BYTES:
        raw, cut = raw[:LINE_BYTES], cut + len(raw) - LINE_BYTES
    html = coloured(raw.decode("utf-8", "replace"))
    if cut:
        html += f'<span class="cut">… ({byte_count(cut, more=True)} not shown)</span>'
    return _line("agent", html)


def coloured(text: str) -> str:
    """`text` as HTML: escaped, its colours as CSS classes, every other escape, control and
    bidi character neutralised."""
    out: list[str] = []
    colour: str | None = None
    bold = False
    for codes, piece in coloured_pieces(text):
        colour, bold = _sgr(codes, colour, bold)
        out.append(_piece(piece, colour, bold))
    return "".join(out)


def _sgr(codes: str | None, colour: str | None, bold: bool) -> tuple[str | None, bool]:
    """The colour and weight after the SGR escape with parameters `codes`."""
    for part in codes.split(";") if codes is not None else ():
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
    return colour, bold


def _piece(text: str, colour: str | None, bold: bool) -> str:
    clean = str(escape(text))
    css = " ".join(c for c in (colour, "bold" if bold else None) if c)
    return f'<span class="{css}">{clean}</span>' if css and clean else clean
