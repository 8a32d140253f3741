"""Terminal escape sequences and control characters: the one place that takes them out of text.

Agent output, model text and build logs may carry colours, cursor moves, window titles or
hyperlinks; plain output, the live view, build logs and JUnit reports show only the text.
"""

from __future__ import annotations

import codecs
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
_CONTROLS = frozenset(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)))
# An escape sequence longer than this is not waited for (real ones are a few dozen bytes).
_MAX_PENDING = 4096


def strip_escapes(text: str, *, keep: str = "\t\n\r") -> str:
    """`text` without escape sequences and without control characters other than `keep`."""
    text = _ESCAPE.sub("", text)
    drop = _CONTROLS.difference(keep)
    if not any(c in drop for c in text):
        return text
    return "".join(c for c in text if c not in drop)


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
