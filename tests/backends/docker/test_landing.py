"""What a step's end says: a merge blocked by the user's own files names them and what to do
(and doing it lands the step); Ctrl-C and `fks clean` say what they saved."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_runner.testing.helpers import fks, git
from sandbox_runner.testing.sandboxed import (
    add_script,
    configure,
    interrupt_once_logged,
    record,
    run_with_user_commit,
    sandbox,
    waiting_agent,
)

pytestmark = pytest.mark.docker

PAGES = "mkdir -p pages && for n in 1 2 3 4 5; do echo agent > pages/p$n.md; done"


def blocked_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if "could not update 'main'" in line]
    return line


def test_untracked_files_in_the_way_are_named_with_the_fix(repo: Path) -> None:
    add_script(
        repo,
        "pages.sh",
        f"#!/bin/sh\n{PAGES}\ngit add pages && git commit -qm pages\necho FORKHESTRA_COMPLETE\n",
    )
    (repo / "pages").mkdir()
    for n in range(1, 6):
        (repo / "pages" / f"p{n}.md").write_text("mine\n")
    res = sandbox("./scripts/pages.sh:2")
    assert res.code == 1, res.output
    rec = record(repo)
    branch = rec["steps"][0]["branch"]
    assert blocked_line(res.stdout).endswith(
        f"could not update 'main' with {branch}: it would overwrite your untracked files "
        "pages/p1.md, pages/p2.md, pages/p3.md and 2 more; commit, stash or move them, then "
        f"continue with: fks run --resume {rec['id']} (or: git merge {branch})"
    )
    assert "\t" not in res.output and "Aborting" not in res.output
    (repo / "pages").rename(repo.parent / "moved-pages")  # as it says
    res = fks("run", "--resume", rec["id"], cwd=repo)
    assert res.code == 0, res.output
    assert (repo / "pages" / "p5.md").read_text() == "agent\n"


def test_uncommitted_changes_in_the_way_are_named(repo: Path, tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    add_script(
        repo,
        "edit.sh",
        waiting_agent(flags, "echo agent > README.md\ngit commit -qam 'agent edits README'"),
    )
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    # The user commits one file and leaves README.md changed but uncommitted.
    code, out, err, _ = run_with_user_commit(
        repo, flags, "./scripts/edit.sh:2", {"user.txt": "mine\n"}, dirty={"README.md": "wip\n"}
    )
    assert code == 1, out + err
    branch = record(repo)["steps"][0]["branch"]
    assert f"with {branch}: it would overwrite your uncommitted changes to README.md; " in (
        blocked_line(out)
    )
    assert (repo / "README.md").read_text() == "wip\n"  # never touched


def test_ctrl_c_and_clean_say_what_they_saved(repo: Path) -> None:
    """Ctrl-C saves the commits made so far (and says so); the files left uncommitted stay in
    the workspace, and `fks clean` commits them (and says that, not that it saved commits)."""
    add_script(
        repo,
        "half.sh",
        "#!/bin/sh\necho c > c.txt && git add c.txt && git commit -qm committed\n"
        "echo u > u.txt\necho waiting\nsleep 120\n",
    )
    code, out, err, _ = interrupt_once_logged(repo, "./scripts/half.sh:2", "waiting")
    assert code == 130, out + err
    rec = record(repo)
    branch = rec["steps"][0]["branch"]
    assert f"Saved the commits of the stopped iteration on {branch}" in out
    assert "killed" not in out + err
    assert f"fks clean commits them to {branch}" in out
    assert git(repo, "log", "-1", "--format=%s", branch) == "committed"  # saved by Ctrl-C
    res = fks("clean", cwd=repo)
    assert res.code == 0, res.output
    assert f"committed what ./scripts/half.sh left uncommitted to {branch}" in res.stdout
    assert "commits" not in res.stdout.replace("committed what", "")
    assert git(repo, "show", f"{branch}:u.txt") == "u"
