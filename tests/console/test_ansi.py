"""Agent escape sequences never reach plain output or the live view; one function strips them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fks_testing.helpers import fks

from sandbox_runner.console.ansi import EscapeFilter, strip_escapes
from sandbox_runner.console.live import clean_line

COLOURED = "\x1b[1;31mred\x1b[0m \x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1bPq#0\x1b\\ok\x1b(B"


def test_strip_escapes_removes_csi_osc_dcs_and_controls() -> None:
    assert strip_escapes(COLOURED) == "red link ok"
    assert strip_escapes("a\x07b\x08c\x9bd\te\n") == "abcd\te\n"
    assert strip_escapes("a\tb\nc", keep="") == "abc"


def test_unterminated_title_stops_at_the_newline() -> None:
    assert strip_escapes("\x1b]0;never ends\nnext line\n") == "\nnext line\n"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_filter_strips_sequences_split_across_chunks(size: int) -> None:
    data = f"{COLOURED}\nnaïve ✓\n".encode()
    filt = EscapeFilter()
    out = b"".join(filt.feed(data[i : i + size]) for i in range(0, len(data), size))
    assert (out + filt.flush()).decode() == "red link ok\nnaïve ✓\n"


def test_filter_never_delays_plain_text() -> None:
    filt = EscapeFilter()
    assert filt.feed(b"hello\n") == b"hello\n"
    assert filt.feed(b"half \x1b[3") == b"half "
    assert filt.feed(b"1mdone") == b"done"
    assert filt.feed(b"\x1b") == b""
    assert filt.flush() == b""


def test_live_view_uses_the_same_stripping() -> None:
    assert clean_line(COLOURED) == "red link ok"


def test_plain_output_has_no_control_sequences(project: Path) -> None:
    agent = project / "colours.sh"
    agent.write_text(
        "#!/bin/sh\n"
        "printf '\\033[1;32mgreen\\033[0m \\033]0;title\\007done\\n'\n"
        "printf '\\033[31merror\\033[0m\\n' >&2\n"
    )
    agent.chmod(0o755)
    res = fks("run", "./colours.sh")
    assert res.code == 0, res.output
    assert "green done" in res.stdout and "error" in res.stderr
    assert "\x1b" not in res.stdout + res.stderr


def test_one_escape_pattern_in_the_package() -> None:
    package = Path(__file__).parents[2] / "sandbox_runner"
    holders = {
        path.name
        for path in package.rglob("*.py")
        if re.search(r"\\x1b|\\033", path.read_text(encoding="utf-8"))
    }
    assert holders == {"ansi.py"}


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u2028\u2029"


def test_bidi_controls_are_shown_not_obeyed_everywhere() -> None:
    visible = "<U+202A><U+202B><U+202C><U+202D><U+202E><U+2066><U+2067><U+2068><U+2069>"
    visible += "<U+200E><U+200F><U+061C><U+2028><U+2029>"
    assert strip_escapes(f"name{BIDI}gpj.sh") == f"name{visible}gpj.sh"
    assert clean_line(f"name{BIDI}gpj.sh") == f"name{visible}gpj.sh"  # the live view
    filt = EscapeFilter()
    data = f"name{BIDI}gpj.sh\n".encode()
    out = b"".join(filt.feed(data[i : i + 1]) for i in range(len(data))) + filt.flush()
    assert out.decode() == f"name{visible}gpj.sh\n"
