"""Terminal escape sequences, control and bidi characters: the one place that neutralises them.

Agent output, model text, commit subjects, file and branch names and build logs may carry
colours, cursor moves, window titles, hyperlinks, clipboard writes (OSC 52) or bidi controls
that show `name\u202egpj.sh` reversed. Everything fks shows of them goes through
`strip_escapes`: escape sequences and control characters are dropped, bidi controls shown as
`<U+202E>`.
"""

from __future__ import annotations

import codecs
import functools
import re

# Tolerant: an unterminated sequence is removed up to where it would end (a newline or the next
# ESC for strings), so a stray ESC cannot swallow the rest of the output.
_ESCAPE = re.compile(
    r"\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks)
    r"|\x1b[PX^_][^\x1b\n]*(?:\x1b\\)?"  # DCS, SOS, PM, APC
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (colours, cursor moves)
    r"|\x1b[ -/]*[0-~]?"  # two-character escapes
)
# Complete sequences only: what a stream filter may remove without waiting for more bytes.
_COMPLETE = re.compile(
    r"\x1b(?:\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[PX^_][^\x1b\n]*\x1b\\"
    r"|\[[0-?]*[ -/]*[@-~]|[ -/]*[0-OQ-WYZ\\`-~])"  # not `[`, `]`, P, X, ^, _: those open more
)
_CONTROLS = "".join(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)))
# Characters that reorder or break what a terminal shows around them without being seen:
# bidi embeddings, overrides, isolates and marks, and the line and paragraph separators.
_INVISIBLE = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# An escape sequence longer than this is not waited for (real ones are a few dozen bytes).
_MAX_PENDING = 4096


def strip_escapes(text: str, *, keep: str = "\t\n\r") -> str:
    """`text` as fks shows agent-written text: without escape sequences, without control
    characters other than `keep`, and with bidi controls made visible (`<U+202E>`)."""
    text = _ESCAPE.sub("", text)
    text = _INVISIBLE.sub(_visible, text)
    return _controls(keep).sub("", text)


_SGR = re.compile(r"\x1b\[([0-9;]{0,32})m")
_MARK = "\ue000"  # a private-use character: where a colour escape was


def coloured_pieces(text: str) -> list[tuple[str | None, str]]:
    """`text` cut at its colour (SGR) escapes: (the escape's parameters, None before the first;
    the text up to the next one, neutralised as by `strip_escapes` keeping tabs)."""
    if "\x1b" not in text:
        return [(None, strip_escapes(text, keep="\t"))]
    # Neutralised in one pass: each colour escape stands in as a mark the pass keeps; should
    # another escape have swallowed a mark, each piece is neutralised on its own.
    text = text.replace(_MARK, "")
    codes: list[str | None] = [None, *(m.group(1) for m in _SGR.finditer(text))]
    pieces = strip_escapes(_SGR.sub(_MARK, text), keep="\t").split(_MARK)
    if len(pieces) != len(codes):
        pieces = [strip_escapes(piece, keep="\t") for piece in _SGR.split(text)[::2]]
    return list(zip(codes, pieces, strict=True))


_DIFF_COLOURS = (("+++", "1"), ("---", "1"), ("diff ", "1"), ("@@", "36"), ("+", "32"), ("-", "31"))


def diff_colour(line: str) -> str:
    """A line of a patch (already neutralised) coloured as `git diff --color` would."""
    for start, code in _DIFF_COLOURS:
        if line.startswith(start):
            return f"\x1b[{code}m{line}\x1b[m"
    return line


def _visible(match: re.Match[str]) -> str:
    return f"<U+{ord(match.group()):04X}>"


@functools.cache
def _controls(keep: str) -> re.Pattern[str]:
    drop = "".join(c for c in _CONTROLS if c not in keep)
    return re.compile(f"[{re.escape(drop)}]")


class EscapeFilter:
    """`strip_escapes` for a byte stream cut into arbitrary chunks (UTF-8; bad bytes become �).

    Only an escape sequence still unfinished at the end of a chunk is held back, so plain text
    is never delayed.
    """

    def __init__(self, *, keep: str = "\t\n") -> None:
        self._keep = keep
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, chunk: bytes) -> bytes:
        """The plain bytes of `chunk` that can be shown now."""
        text = self._pending + self._decoder.decode(chunk)
        start = text.rfind("\x1b")
        unfinished = (
            start >= 0
            and len(text) - start < _MAX_PENDING
            and "\n" not in text[start:]
            and _COMPLETE.match(text, start) is None
        )
        text, self._pending = (text[:start], text[start:]) if unfinished else (text, "")
        return strip_escapes(text, keep=self._keep).encode()

    def flush(self) -> bytes:
        """Whatever is held back, cleaned as it is (the stream ended or is interrupted)."""
        text = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return strip_escapes(text, keep=self._keep).encode()
