"""A sandboxed run that cannot start: refused before anything starts when fks can tell, and
when it fails at its first iteration all the same, it leaves nothing behind (no run record,
step branch, workspace volume or container)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import git
from fks_testing.sandboxed import add_script, nothing_started, sandbox

pytestmark = pytest.mark.docker

AGENT = "#!/bin/sh\necho hi\necho FORKHESTRA_COMPLETE\n"


def test_an_uncommitted_agent_is_refused_before_anything_starts(repo: Path) -> None:
    add_script(repo, "new.sh", AGENT, commit=False)
    res = sandbox("./scripts/new.sh:2")
    assert res.code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "fks: agent './scripts/new.sh' is not in the last commit of 'main', and the sandbox's "
        "workspace holds only what is: scripts/new.sh is untracked; commit it "
        "(git add scripts/new.sh && git commit)"
    ]
    assert res.stdout == ""
    nothing_started(repo)


def test_an_agent_ignored_by_gitignore_is_refused_saying_so(repo: Path) -> None:
    (repo / ".gitignore").write_text("scripts/local-*\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore local scripts")
    add_script(repo, "local-agent.sh", AGENT, commit=False)
    res = sandbox("./scripts/local-agent.sh:2")
    assert res.code == 2, res.output
    assert "scripts/local-agent.sh is ignored by .gitignore" in res.stderr
    assert "git add -f scripts/local-agent.sh && git commit" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    nothing_started(repo)
    git(repo, "add", "-f", "scripts/local-agent.sh")  # the fix it names works
    git(repo, "commit", "-qm", "add the agent")
    assert sandbox("./scripts/local-agent.sh:2").code == 0


def test_an_agent_missing_from_another_base_is_refused(repo: Path) -> None:
    git(repo, "branch", "older")
    add_script(repo, "newer.sh", AGENT)  # committed on main only
    res = sandbox("./scripts/newer.sh:2", "--base", "older")
    assert res.code == 2, res.output
    assert "agent './scripts/newer.sh' is not in the last commit of 'older'" in res.stderr
    assert "scripts/newer.sh is tracked in this checkout only; commit it on 'older'" in res.stderr
    git(repo, "branch", "-D", "older")
    nothing_started(repo)


def test_a_run_failing_at_its_first_iteration_leaves_nothing(repo: Path, tmp_path: Path) -> None:
    """A committed link to a script only the host has: fks sees it, the container does not."""
    outside = tmp_path / "outside.sh"
    outside.write_text(AGENT)
    outside.chmod(0o755)
    (repo / "scripts" / "linked.sh").symlink_to(outside)
    git(repo, "add", "scripts/linked.sh")
    git(repo, "commit", "-qm", "a link")
    res = sandbox("./scripts/linked.sh:2")
    assert res.code == 2, res.output
    assert "not found in the image" in res.stderr and "Traceback" not in res.output
    nothing_started(repo)
