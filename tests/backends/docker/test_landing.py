"""What a step's end says: a merge blocked by the user's own files (untracked, ignored, or
those secrets are read from) names them and what to do (and doing it lands the step, without
running its agent again); Ctrl-C and `fks clean` say what they saved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trustme
from fks_testing.helpers import fks, git
from fks_testing.sandboxed import (
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


# --- what git does not track, and the files secrets are read from --------------------------

FORCE_ADDS = """#!/bin/sh
echo AGENT=1 > .env
echo agent > data
mkdir -p .venv/bin && printf '#!/bin/sh\\ntouch /tmp/fks-landed-git-ran\\n' > .venv/bin/git
git add -f .env data .venv/bin/git && git commit -qm "agent: .env, data and a git"
echo FORKHESTRA_COMPLETE
"""


def test_a_landing_never_overwrites_or_deletes_ignored_files(repo: Path) -> None:
    """The agent force-adds `.env`, a file where the user keeps an ignored folder holding a
    database, and a `git` into the user's ignored `.venv/bin`: `git merge` would replace the
    first two and add the third without a word. The landing refuses instead and names them;
    the user's files are byte for byte what they were, the base did not move, the branch is
    kept. Moving the files away is not enough: what the user ignores is theirs, so resuming
    refuses again, and only a merge by hand takes it."""
    (repo / ".gitignore").write_text(".env\ndata/\n.venv/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore .env, data/ and .venv/")
    add_script(repo, "force.sh", FORCE_ADDS)
    env, db = b"TOKEN=the-users-own\n", os.urandom(4096)
    (repo / ".env").write_bytes(env)
    (repo / "data").mkdir()
    (repo / "data" / "app.db").write_bytes(db)
    (repo / ".venv" / "bin").mkdir(parents=True)
    base = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/force.sh")
    assert res.code == 1, res.output
    rec = record(repo)
    branch = rec["steps"][0]["branch"]
    assert blocked_line(res.stdout).endswith(
        f"could not update 'main' with {branch}: it would overwrite your untracked files .env, "
        "data/, and it adds .env, .venv/bin/git, data, which your checkout ignores (.gitignore): "
        "what you ignore stays yours, not the branch's; review the branch and merge it by hand "
        f"only if that is meant, then continue with: fks run --resume {rec['id']} (or: git "
        f"merge {branch})"
    )
    assert (repo / ".env").read_bytes() == env and (repo / "data" / "app.db").read_bytes() == db
    assert list((repo / ".venv" / "bin").iterdir()) == []
    assert git(repo, "rev-parse", "main") == base
    assert git(repo, "show", f"{branch}:.env") == "AGENT=1"
    (repo / ".env").rename(repo.parent / "saved.env")
    (repo / "data").rename(repo.parent / "saved-data")
    res = fks("run", "--resume", rec["id"], cwd=repo)
    assert res.code == 1, res.output
    assert "it adds .env, .venv/bin/git, which your checkout ignores" in blocked_line(res.stdout)
    assert list((repo / ".venv" / "bin").iterdir()) == []
    assert git(repo, "rev-parse", "main") == base
    assert (repo.parent / "saved-data" / "app.db").read_bytes() == db


CREDENTIALS = """#!/bin/sh
mkdir -p .secrets certs
echo agent-token > .secrets/token
printf -- '-----BEGIN CERTIFICATE-----\\nAGENT\\n-----END CERTIFICATE-----\\n' > certs/ca.pem
git add -f .secrets/token certs/ca.pem && git commit -qm "agent: credentials"
echo FORKHESTRA_COMPLETE
"""


def test_a_landing_never_changes_a_file_secrets_are_read_from(repo: Path) -> None:
    """The agent commits its own token where `sandbox.secrets` reads the user's (an ignored
    file) and its own CA over the committed one `caCerts` names: landed, the next run would
    send the user's requests with the agent's token and trust the agent's CA. The landing
    refuses, naming both; nothing of the user's changes, and resuming does not land it either
    (only the user, merging by hand, can)."""
    (repo / ".gitignore").write_text(".secrets/\n")
    (repo / "certs").mkdir()
    ca = trustme.CA().cert_pem.bytes()
    (repo / "certs" / "ca.pem").write_bytes(ca)
    git(repo, "add", ".gitignore", "certs")
    git(repo, "commit", "-qm", "the CA the proxy trusts")
    (repo / ".secrets").mkdir()
    (repo / ".secrets" / "token").write_text("the-users-token\n")
    add_script(repo, "creds.sh", CREDENTIALS)
    secret = {"host": "api.test", "file": ".secrets/token"}
    configure(repo, {"sandbox": {"secrets": [secret], "caCerts": ["certs/ca.pem"]}})
    base = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/creds.sh")
    assert res.code == 1, res.output
    rec = record(repo)
    branch = rec["steps"][0]["branch"]
    line = blocked_line(res.stdout)
    assert f"with {branch}: it changes .secrets/token, certs/ca.pem, which sandbox.secrets" in line
    assert "review the branch and merge it by hand only if that is meant" in line
    assert (repo / ".secrets" / "token").read_text() == "the-users-token\n"
    assert (repo / "certs" / "ca.pem").read_bytes() == ca
    assert git(repo, "rev-parse", "main") == base
    assert git(repo, "show", f"{branch}:.secrets/token") == "agent-token"
    res = fks("run", "--resume", rec["id"], cwd=repo)
    assert res.code == 1 and "it changes .secrets/token, certs/ca.pem" in res.stdout, res.output
    assert git(repo, "rev-parse", "main") == base
    assert (repo / ".secrets" / "token").read_text() == "the-users-token\n"


# --- resuming a step whose merge was blocked ------------------------------------------------


def test_resuming_a_blocked_merge_only_merges_whatever_the_steps_count(repo: Path) -> None:
    """A step of one iteration (`:1`, or none) whose merge was blocked: `fks run --resume`
    (the fix the line gave) merges it without running the agent again, says so, and records
    that it landed on resume."""
    add_script(
        repo,
        "once.sh",
        "#!/bin/sh\necho agent > x.md\ngit add x.md && git commit -qm x\n"
        "echo FORKHESTRA_COMPLETE\n",
    )
    for dsl in ("./scripts/once.sh:1", "./scripts/once.sh"):
        (repo / "x.md").write_text("mine\n")
        res = sandbox(dsl)
        assert res.code == 1 and "it would overwrite your untracked file x.md" in res.stdout
        (repo / "x.md").unlink()  # as it says
        res = fks("run", "--resume", "last", cwd=repo)
        assert res.code == 0, res.output
        rec = record(repo)
        branch, run_id = rec["steps"][0]["branch"], rec["id"]
        lines = [line.removeprefix("[fks] ") for line in res.stdout.splitlines()]
        assert (
            f"Resuming step 1/1 (./scripts/once.sh): its agent had finished, only its merge was "
            f"left; merging {branch} again (no agent runs)"
        ) in lines, res.stdout
        assert any(line.startswith(f"Merged {branch} into 'main'") for line in lines)
        assert (
            "Landed on resume: ./scripts/once.sh (only its merge was left; no agent ran)" in lines
        )
        assert "Running:" not in res.stdout and "Done:" not in res.stdout
        assert len(rec["steps"][0]["iterations"]) == 1  # the agent ran once, before
        assert (rec["status"], rec["steps"][0]["reason"]) == ("complete", "landed_on_resume")
        review = fks("review", run_id, cwd=repo)
        assert "(complete, landed_on_resume)" in review.stdout, review.output
        assert (repo / "x.md").read_text() == "agent\n"
        git(repo, "rm", "-q", "x.md")
        git(repo, "commit", "-qm", "again")
