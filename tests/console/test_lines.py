"""Agent data read a line at a time with a bound: what `fks logs --follow` and review rely on."""

from __future__ import annotations

import io
from pathlib import Path

from sandbox_runner.console.lines import LineReader, bounded_lines, shown_line


def test_bounded_lines_cut_and_count_what_they_drop() -> None:
    data = b"short\n" + b"x" * 100 + b"\n\nlast without newline"
    assert list(bounded_lines(io.BytesIO(data), 10)) == [
        (b"short", 0),
        (b"x" * 10, 90),
        (b"", 0),
        (b"last witho", 10),
    ]


def test_a_growing_log_gives_whole_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "log"
    reader = LineReader(8)

    def grow(data: bytes, *, final: bool = False) -> list[tuple[bytes, int]]:
        with log.open("ab") as f:
            f.write(data)
        with log.open("rb") as f:
            return list(reader.read(f, final=final))

    assert grow(b"one\ntw") == [(b"one", 0)]  # "tw" waits for the rest of its line
    assert grow(b"o\n" + b"y" * 20) == [(b"two", 0)]  # a long line waits for its end too
    assert grow(b"y" * 20) == []
    assert grow(b"\nend") == [(b"y" * 8, 32)]
    assert grow(b"", final=True) == [(b"end", 0)]
    assert grow(b"", final=True) == []


def test_shown_line_neutralises_and_says_what_was_cut() -> None:
    assert (
        shown_line(b"\x1b]0;t\x07a\xe2\x80\xaeb\xff", 3)
        == "a<U+202E>b\ufffd… (3 more bytes not shown)"
    )
    assert shown_line(b"z" * 5000) == "z" * 4096 + "… (904 more bytes not shown)"
