"""A reader that goes away (`fks … | head -3`) ends the output, not the work: the run completes
and its record says so, `fks init` writes every file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from fks_testing.helpers import FKS, init_repo

from sandbox_runner.commands.init import FILES


def _with_closed_stdout(args: list[str], cwd: Path, stderr: Path) -> int:
    """Run fks with a stdout pipe whose reader has already gone: every write to it fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        with stderr.open("w") as err:
            done = subprocess.run(
                [FKS, *args],
                cwd=cwd,
                stdout=write,
                stderr=err,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                timeout=120,
                check=False,
            )
    finally:
        os.close(write)
    return done.returncode


def test_run_completes_when_its_output_pipe_closes(project: Path, tmp_path: Path) -> None:
    init_repo(project)
    err = tmp_path / "stderr.txt"
    code = _with_closed_stdout(["run", "fake:3 -> builder"], project, err)
    assert code == 0, err.read_text()
    [run] = (project / ".forge" / "runs").iterdir()
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "complete", record
    assert [s["status"] for s in record["steps"]] == ["complete", "complete"]
    assert "Broken pipe" not in err.read_text()


def test_init_writes_everything_when_its_output_pipe_closes(project: Path, tmp_path: Path) -> None:
    err = tmp_path / "stderr.txt"
    assert _with_closed_stdout(["init"], project, err) == 0, err.read_text()
    for rel in FILES:
        assert (project / rel).is_file(), rel
    assert (project / "forge" / "chains.schema.json").is_file()
    assert err.read_text() == ""
