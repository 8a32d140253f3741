"""`fks review RUN [--diff]`: step branches of real runs, merged or kept for review."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from fks_testing.helpers import commit_scripts, fks, git, init_repo

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


# --- what an agent left on its branch is shown, never obeyed ------------------------------------

# Clipboard write (OSC 52), hyperlink (OSC 8), window title, screen clear, a bidi override.
HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07clip \x1b]8;;https:evil\x1b\\link\x1b]8;;\x1b\\ "
    "\x1b]0;title\x07\x1b[2J\x1b[Hcleared name\u202egpj.sh"
)


def sandboxed_run(project: Path, branch: str) -> str:
    """A finished run whose one step left `branch` (forked from main) unmerged, as a sandboxed
    run records it; returns the run's id."""
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord

    assert fks("run", "./scripts/done.sh", cwd=project).code == 0
    git(project, "reset", "-q", "--hard", "HEAD~1")  # the step's commit goes to its branch
    run_dir = next((project / ".forge" / "runs").iterdir())
    record = RunRecord.model_validate_json((run_dir / "run.json").read_text())
    record.options.sandbox = True
    step = record.steps[0]
    step.repo, step.base_branch, step.branch = str(project), "main", branch
    step.start_commit = git(project, "rev-parse", "main")
    write_atomic(run_dir / "run.json", record.model_dump_json())
    return run_dir.name


def hostile_branch(project: Path, branch: str) -> None:
    """`branch` with a commit whose subject and contents carry `HOSTILE`, its file name a bidi
    control."""
    git(project, "config", "core.quotePath", "false")  # file names as they are, as some users set
    git(project, "switch", "-q", "-c", branch)
    # git quotes control characters in file names itself, not bidi controls.
    (project / "name\u202egpj.sh").write_text(f"{HOSTILE}\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", f"subject {HOSTILE}")
    git(project, "switch", "-q", "main")


def assert_neutralised(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert not any(c in text for c in "\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
    assert "name<U+202E>gpj.sh" in text


def test_review_neutralises_agent_subjects_file_names_and_diffs(project: Path) -> None:
    branch = "fks/x/1-evil\u202egpj.sh"
    sandboxed_run(project, branch)
    hostile_branch(project, branch)
    for args in (("review", "last"), ("review", "last", "--diff")):
        done = fks(*args, cwd=project)
        assert done.code == 0, done.output
        assert_neutralised(done.stdout)
        assert "branch:    fks/x/1-evil<U+202E>gpj.sh" in done.stdout
        assert "subject clip link cleared name<U+202E>gpj.sh" in done.stdout
        assert " name<U+202E>gpj.sh | 1 +" in done.stdout
    assert "+clip link cleared name<U+202E>gpj.sh" in done.stdout  # the patch of --diff


def test_review_of_a_huge_commit_message_is_bounded(project: Path, tmp_path: Path) -> None:
    import sys

    branch = "fks/x/1-huge"
    sandboxed_run(project, branch)
    message = tmp_path / "message"
    message.write_bytes(b"A" * 100_000_000)
    commit = git(project, "commit-tree", "main^{tree}", "-p", "main", "-F", str(message))
    git(project, "branch", branch, commit)
    # fks in a process of its own, reporting its peak memory (VmHWM: ru_maxrss survives exec).
    measure = (
        "import re, sys\n"
        "from sandbox_runner.cli import main\n"
        "sys.argv = ['fks', 'review', 'last', '--diff']\n"
        "try:\n    main()\n"
        "finally:\n"
        "    status = open('/proc/self/status').read()\n"
        "    peak = re.search(r'VmHWM:\\s*(\\d+) kB', status).group(1)\n"
        "    print(f'peak {peak}', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure], cwd=project, capture_output=True, check=False
    )
    peak_kib = int(done.stderr.decode().rsplit("peak ", 1)[1])
    assert peak_kib < 100_000, f"fks review peaked at {peak_kib} KiB"
    assert len(done.stdout) < 10_000
    shown = re.search(rb" (A+)\xe2\x80\xa6 \(([\d,]+) more bytes not shown\)\n", done.stdout)
    assert shown is not None, done.stdout
    assert len(shown[1]) + int(shown[2].replace(b",", b"")) == 100_000_000


def test_review_diff_on_a_terminal_has_fks_colours_only(project: Path) -> None:
    import os
    import pty

    from fks_testing.helpers import FKS

    branch = "fks/x/1-evil"
    sandboxed_run(project, branch)
    hostile_branch(project, branch)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [FKS, "review", "last", "--diff"], cwd=project, stdin=follower, stdout=follower
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    text = b"".join(chunks).decode()
    assert "\x1b[32m+clip link cleared name<U+202E>gpj.sh\x1b[m" in text  # fks's green
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\x07" not in text
    assert "\u202e" not in text
