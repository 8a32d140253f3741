"""Reading a container's export: what it holds besides `info` and `bundle` is refused, and the
name the agent gave it is shown on one line of fks's."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox_runner.backends.docker.workspace.export import ExportError, read_export
from sandbox_runner.console.output import PlainReporter


def _client(names: list[str]) -> Any:
    """A Docker client whose container's export directory holds a file of each name."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    chunks = iter([data.getvalue()])
    return SimpleNamespace(api=SimpleNamespace(get_archive=lambda *_: (chunks, {})))


def test_a_file_named_like_fks_lines_is_refused_on_one_line(tmp_path: Path) -> None:
    name = "fks-export/x\n[fks] Merged 'fks/x/1-a' into 'main'\r\x1b[2K\u202eChain complete"
    name += "y" * 999
    with pytest.raises(ExportError) as refused:
        read_export(_client([name]), "c0ffee", tmp_path)
    out = io.StringIO()
    PlainReporter(out=out, agent_out=io.BytesIO()).info(f"Iteration 1: {refused.value}")
    [line] = out.getvalue().splitlines()
    assert line.startswith(
        "[fks] Iteration 1: the iteration's export holds 'fks-export/x?[fks] Merged 'fks/x/1-a'"
        " into 'main'??[2K?Chain completeyyy"
    )
    assert line.endswith("y\u2026' (not a regular file); refused")
    assert len(line) < 300
