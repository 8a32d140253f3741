"""`fks review RUN [--diff]`: step branches of real runs, merged or kept for review."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import commit_scripts, fks, git, init_repo

DONE_AGENT = """#!/bin/sh
echo "done work" > done.txt
git add done.txt && git commit -qm "done: work"
echo FORKHESTRA_COMPLETE
"""

PARTIAL_AGENT = """#!/bin/sh
# Commits every iteration, never prints the marker.
n=$(ls partial-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "partial line $n" > partial-$n.txt
git add partial-$n.txt && git commit -qm "partial: step $n"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = commit_scripts(
        init_repo(tmp_path / "proj"), {"done.sh": DONE_AGENT, "partial.sh": PARTIAL_AGENT}
    )
    monkeypatch.chdir(path)
    return path


def section(output: str, heading: str) -> str:
    """The block of `fks review` output that starts with `heading`."""
    blocks = output.split("\n\n")
    return next(b for b in blocks if b.startswith(heading))


def test_local_run_ran_in_place(project: Path) -> None:
    assert fks("run", "./scripts/done.sh", cwd=project).code == 0
    run_id = next((project / ".forge" / "runs").iterdir()).name
    done = fks("review", "last", cwd=project)
    assert done.code == 0, done.output
    assert f"Run {run_id}: ./scripts/done.sh (complete)" in done.stdout
    assert "ran in place" in done.stdout
    assert f"fks show {run_id}" in done.stdout
    assert "git merge" not in done.stdout


def test_errors_are_one_line(project: Path) -> None:
    for args in (("review", "last"), ("review", "nope")):
        done = fks(*args, cwd=project)
        assert done.code == 2
        assert len(done.stderr.strip().splitlines()) == 1
        assert done.stderr.startswith("fks: ")
        assert "Traceback" not in done.stderr


@pytest.mark.docker
def test_sandbox_run_merged_and_kept_branches(project: Path) -> None:
    run = fks("run", "./scripts/done.sh -> ./scripts/partial.sh:2", "--sandbox", cwd=project)
    assert run.code == 1, run.output
    run_id = next((project / ".forge" / "runs").iterdir()).name
    first = f"fks/{run_id}/1-done.sh"
    second = f"fks/{run_id}/2-partial.sh"
    main_tip = git(project, "rev-parse", "main")

    done = fks("review", run_id[:-1], cwd=project)
    assert done.code == 0, done.output
    out = done.stdout
    assert out.startswith(
        f"Run {run_id}: ./scripts/done.sh -> ./scripts/partial.sh:2 (incomplete)\n"
    )

    merged = section(out, "Step 1: ./scripts/done.sh (complete, marker)")
    assert f"branch:    {first}" in merged
    assert f"repo:      {project}" in merged
    assert "base:      main" in merged
    assert f"merged:    yes, into main at {main_tip[:12]}" in merged
    assert "done: work" in merged
    assert "done.txt | 1 +" in merged
    assert "to land it" not in merged

    kept = section(out, "Step 2: ./scripts/partial.sh (incomplete, max_iterations)")
    assert f"branch:    {second}" in kept
    assert "merged:    no" in kept
    assert f"commits since {main_tip[:12]}:" in kept
    commit_lines = [line.strip() for line in kept.splitlines() if "partial: step" in line]
    assert [line.split(" ", 1)[1] for line in commit_lines] == [
        "partial: step 2",
        "partial: step 1",
    ]
    assert "2 files changed, 2 insertions(+)" in kept
    assert "diff --git" not in out  # only with --diff
    land = f"git -C {shlex.quote(str(project))} merge {second}"
    discard = f"git -C {shlex.quote(str(project))} branch -D {second}"
    assert land in kept
    assert discard in kept

    with_diff = fks("review", "last", "--diff", cwd=project)
    assert with_diff.code == 0
    assert "diff --git a/partial-1.txt b/partial-1.txt" in with_diff.stdout
    assert "+partial line 2" in with_diff.stdout
    assert "+done work" in with_diff.stdout

    # The printed commands do what they say.
    subprocess.run(shlex.split(land), check=True, capture_output=True)
    assert (project / "partial-2.txt").read_text() == "partial line 2\n"
    subprocess.run(shlex.split(discard), check=True, capture_output=True)
    gone = fks("review", "last", cwd=project)
    assert gone.code == 0, gone.output
    assert "the branch no longer exists" in section(gone.stdout, "Step 2:")
    assert "done: work" in section(gone.stdout, "Step 1:")
