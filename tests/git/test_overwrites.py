"""Landing next to what git does not track (`merge_back` with real git in tmp_path): a branch that
would write over the user's untracked or ignored files, folders of them, or what is reached
through a link, never lands, and neither does one that changes a file secrets are read from.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fks_testing.helpers import GIT_IDENTITY, git, init_repo

from sandbox_runner.git.landing import merge_back
from sandbox_runner.git.repo import open_repo

BRANCH = "fks/r1/1-agent"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n", "lib/tracked.py": "x = 1\n"})
    (path / ".gitignore").write_text(".env\n*.db\ncache/\n")
    git(path, "add", ".gitignore")
    git(path, "commit", "-qm", "ignores")
    return path


def agent_commits(repo: Path, files: dict[str, str], removed: tuple[str, ...] = ()) -> None:
    """The step branch: one commit on main's tip writing `files` (force-added) and removing
    `removed`, made without touching the user's checkout."""
    env = {"GIT_INDEX_FILE": str(repo / ".git" / "agent-index")}
    git_env(repo, env, "read-tree", "main")
    for name in removed:
        git_env(repo, env, "rm", "-q", "-r", "--cached", name)
    for name, content in files.items():
        blob = git_env(repo, env, "hash-object", "-w", "--stdin", stdin=content)
        git_env(repo, env, "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
    tree = git_env(repo, env, "write-tree")
    commit = git_env(repo, env, "commit-tree", tree, "-p", "main", "-m", "agent")
    git(repo, "branch", "-f", BRANCH, commit)


def git_env(repo: Path, env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_IDENTITY, **env},
    )
    return done.stdout.strip()


def land(repo: Path, kept: tuple[str, ...] = ()) -> str | None:
    """Land the step branch; its `blocked` line (None: it landed)."""
    if kept:
        landing = merge_back(open_repo(repo), "main", BRANCH, "merge", {}, kept=kept)
    else:
        landing = merge_back(open_repo(repo), "main", BRANCH, "merge", {})
    assert landing.merged == (landing.blocked is None), landing
    return landing.blocked


def files_of(repo: Path) -> dict[str, bytes]:
    """Every file of the checkout outside `.git`, links as their target."""
    found = {}
    for path in sorted(repo.rglob("*")):
        if ".git" in path.relative_to(repo).parts or (path.is_dir() and not path.is_symlink()):
            continue
        key = str(path.relative_to(repo))
        found[key] = str(path.readlink()).encode() if path.is_symlink() else path.read_bytes()
    return found


def test_what_git_does_not_track_is_named_wherever_the_merge_writes(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".env").write_text("TOKEN=mine\n")  # ignored, where the agent adds a file
    (repo / "cache").mkdir()  # an ignored folder, where the agent adds a file
    (repo / "cache" / "app.db").write_bytes(os.urandom(512))
    (repo / "lib" / "local.db").write_text("mine\n")  # ignored, in a folder the agent replaces
    (repo / "notes.txt").write_text("mine\n")  # untracked, not ignored
    (repo / "link").symlink_to(outside)  # a link where the agent adds a folder's file
    (repo / "new").mkdir()  # an untracked folder where the agent adds a file, and another
    (repo / "new" / "b.txt").write_text("mine\n")
    agent_commits(
        repo,
        {
            ".env": "A\n",
            "cache": "A\n",
            "lib": "A\n",
            "notes.txt": "A\n",
            "link/x": "A\n",
            "new/a.txt": "A\n",
            "new/b.txt": "A\n",
            "README.md": "agent\n",
        },
        removed=("lib",),
    )
    before, tip = files_of(repo), git(repo, "rev-parse", "main")
    blocked = land(repo)
    assert blocked == (
        "it would overwrite your untracked files .env, cache/, lib/local.db and 3 more, and it "
        "adds .env, cache, which your checkout ignores (.gitignore): what you ignore stays "
        "yours, not the branch's; review the branch and merge it by hand only if that is meant"
    )
    assert files_of(repo) == before and git(repo, "rev-parse", "main") == tip
    assert list(outside.iterdir()) == []
    for name in (".env", "cache", "lib/local.db", "notes.txt", "link", "new/b.txt"):
        (repo / name).rename(tmp_path / name.replace("/", "-"))
    # Out of the way, an ignored path is still the user's: only a merge by hand takes it (a
    # file named `cache` is not what `cache/` ignores: that one is no longer named).
    assert land(repo) == (
        "it adds .env, which your checkout ignores (.gitignore): what you ignore stays "
        "yours, not the branch's; review the branch and merge it by hand only if that is meant"
    )
    git(repo, "merge", "-q", "--ff-only", BRANCH)
    assert (repo / "new" / "a.txt").read_text() == "A\n"
    assert (repo / "link" / "x").read_text() == "A\n" and (repo / "lib").read_text() == "A\n"


def test_what_the_user_staged_is_left_to_git_and_a_merge_commit_is_checked_too(
    repo: Path,
) -> None:
    """A file the user added to the index is git's to judge (it refuses: an uncommitted
    change); with the user's own commit on the base the merge commit is what is checked."""
    agent_commits(repo, {"staged.txt": "agent\n", "notes.txt": "A\n"})
    (repo / "mine.txt").write_text("mine\n")
    git(repo, "add", "mine.txt")
    git(repo, "commit", "-qm", "the user's own work")
    (repo / "staged.txt").write_text("mine\n")
    git(repo, "add", "staged.txt")
    assert land(repo) == (
        "it would overwrite your uncommitted changes to staged.txt; commit, stash or move it"
    )
    git(repo, "rm", "-q", "--cached", "staged.txt")
    (repo / "staged.txt").unlink()
    (repo / "notes.txt").write_text("mine\n")
    assert (
        land(repo) == "it would overwrite your untracked file notes.txt; commit, stash or move it"
    )
    (repo / "notes.txt").unlink()
    assert land(repo) is None
    assert git(repo, "log", "-1", "--format=%p", "main").count(" ") == 1  # a merge commit


def test_a_file_secrets_are_read_from_never_changes_by_landing(repo: Path) -> None:
    (repo / "certs").mkdir()
    (repo / "certs" / "ca.pem").write_text("the user's CA\n")
    (repo / "certs" / "README").write_text("certs\n")
    git(repo, "add", "certs")
    git(repo, "commit", "-qm", "CA")
    kept = ("certs/ca.pem", "secret/token")
    agent_commits(repo, {"certs/ca.pem": "agent CA\n"})
    tip = git(repo, "rev-parse", "main")
    assert land(repo, kept) == (
        "it changes certs/ca.pem, which sandbox.secrets or sandbox.caCerts read (the next run "
        "would send what the branch put there); review the branch and merge it by hand only "
        "if that is meant"
    )
    agent_commits(repo, {"secret": "a file where the token's folder is\n"})
    assert "it changes secret/token" in (land(repo, kept) or "")
    agent_commits(repo, {"secret/token": "the agent's\n"})
    assert "it changes secret/token" in (land(repo, kept) or "")
    assert git(repo, "rev-parse", "main") == tip
    agent_commits(repo, {"certs/README": "more\n"})  # beside them: lands
    assert land(repo, kept) is None


def test_a_submodule_bump_lands_and_its_checkout_is_never_replaced(repo: Path) -> None:
    """A new commit for a submodule leaves its checkout alone (git does not touch it): that
    lands; a file in its place would delete what the checkout holds: that does not."""
    (repo / "sub").mkdir()
    (repo / "sub" / "work.txt").write_text("the submodule's files\n")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    git(repo, "commit", "-qm", "submodule")
    env = {"GIT_INDEX_FILE": str(repo / ".git" / "agent-index")}
    git_env(repo, env, "read-tree", "main")
    git_env(repo, env, "update-index", "--cacheinfo", f"160000,{'2' * 40},sub")
    tree = git_env(repo, env, "write-tree")
    git(
        repo,
        "branch",
        "-f",
        BRANCH,
        git_env(repo, env, "commit-tree", tree, "-p", "main", "-m", "bump"),
    )
    assert land(repo) is None
    agent_commits(repo, {"sub": "a file\n"}, removed=("sub",))
    assert land(repo) == "it would overwrite your untracked file sub/; commit, stash or move it"
    assert (repo / "sub" / "work.txt").read_text() == "the submodule's files\n"


def test_files_added_where_the_checkout_ignores_them_never_land(repo: Path) -> None:
    """An agent's `git add -f` into the user's ignored `.venv` (a `git` in its `bin/`, a `.pth`
    that every start of that Python runs) or as `.env` lands beside nothing of the user's, so
    nothing is in the way: it is still refused, naming the paths, and the checkout is as it
    was. What the user does not ignore lands."""
    (repo / ".gitignore").write_text(".env\n*.db\ncache/\n.venv/\n")
    git(repo, "commit", "-qam", "ignore .venv")
    site = ".venv/lib/python3.11/site-packages"
    (repo / site).mkdir(parents=True)
    (repo / site / "mine.py").write_text("x = 1\n")
    agent_commits(
        repo,
        {".venv/bin/git": "#!/bin/sh\ntouch /tmp/pwned\n", f"{site}/fks.pth": "import os\n"},
    )
    before, tip = files_of(repo), git(repo, "rev-parse", "main")
    assert land(repo) == (
        f"it adds .venv/bin/git, {site}/fks.pth, which your checkout ignores (.gitignore): what "
        "you ignore stays yours, not the branch's; review the branch and merge it by hand only "
        "if that is meant"
    )
    assert files_of(repo) == before and git(repo, "rev-parse", "main") == tip
    agent_commits(repo, {"src/new.py": "y = 2\n"})
    assert land(repo) is None
    assert (repo / "src" / "new.py").read_text() == "y = 2\n"
