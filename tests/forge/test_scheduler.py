"""`fks forge run`'s conductor shows its workers' lines neutralised and bounded."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from sandbox_runner.console.forge_view import PlainForgeView
from sandbox_runner.forge.scheduler import Conductor

WORKER = r"""
import sys
out = sys.stdout.buffer
out.write(b"\x1b]52;c;eA==\x07clip \x1b]0;title\x07\x1b[2Jname\xe2\x80\xaegpj.sh\n")
out.write(b"x" * 20_000_000 + b"\n")
out.write(b"after\n")
"""


def test_worker_lines_are_neutralised_and_cut(tmp_path: Path) -> None:
    shown = io.StringIO()
    conductor = Conductor(
        pick=lambda started: None if started else "T-1",
        parallel=1,
        argv_for=lambda task: [sys.executable, "-c", WORKER],
        view=PlainForgeView(shown),
        cwd=tmp_path,
    )
    assert conductor.run() == {"T-1": 0}
    lines = shown.getvalue().splitlines()
    assert lines[0] == "[T-1] clip name<U+202E>gpj.sh"
    assert lines[1].startswith("[T-1] xxxx") and lines[1].endswith(" more bytes not shown)")
    assert len(lines[1]) < 5000
    assert lines[2:] == ["[T-1] after"]
