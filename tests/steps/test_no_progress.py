"""`fks run --no-progress-limit N`: the breaker for loops that change nothing."""

from __future__ import annotations

import json
from pathlib import Path

from fks_testing.helpers import fks, init_repo


def iterations_run(repo: Path) -> tuple[str, int]:
    (run_dir,) = (repo / ".forge" / "runs").iterdir()
    step = json.loads((run_dir / "run.json").read_text())["steps"][0]
    return step["reason"], len(step["iterations"])


def test_default_breaker_stops_a_loop_without_progress(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    res = fks("run", "fake:6", cwd=repo, env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1, res.output
    assert "(no_progress)" in res.stdout
    assert iterations_run(repo) == ("no_progress", 3)


def test_limit_zero_runs_every_iteration(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    res = fks("run", "fake:6", "--no-progress-limit", "0", cwd=repo, env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1, res.output
    assert iterations_run(repo) == ("max_iterations", 6)


def test_option_beats_the_config(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / "forge").mkdir()
    (repo / "forge" / "chains.json").write_text('{"noProgressLimit": 0}')
    res = fks("run", "fake:6", "--no-progress-limit", "2", cwd=repo, env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1, res.output
    assert iterations_run(repo) == ("no_progress", 2)


def test_negative_limit_is_a_usage_error(project: Path) -> None:
    res = fks("run", "fake:2", "--no-progress-limit", "-1")
    assert res.code == 2 and "--no-progress-limit" in res.stderr
    assert "Traceback" not in res.output
