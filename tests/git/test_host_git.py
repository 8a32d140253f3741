"""The git fks runs on the host, whatever a landed commit or a cloned repository holds: found
in PATH's absolute entries outside the repository only (a `./git`, a `bin/git` never runs),
and running no hook."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fks_testing.attacks import MARK, Host, writing
from fks_testing.helpers import fks, git, init_repo
from fks_testing.sandboxed import COMMIT_AGENT, add_script, configure, record, sandbox

REAL_GIT = shutil.which("git") or "/usr/bin/git"
PATHS = {"empty entry": ":{PATH}", "dot": ".:{PATH}", "the repository's bin": "{repo}/bin:{PATH}"}
"""PATHs whose first entry is in the repository: an empty or relative entry (the working
directory), or a folder of the repository itself (as an activated `.venv/bin` or direnv's
`PATH_add bin` make it)."""


def path_for(kind: str, repo: Path) -> str:
    return PATHS[kind].format(PATH=os.environ["PATH"], repo=repo)


def own_git(marker: str) -> str:
    """A `git` that leaves a marker, then does what git does."""
    return f'#!/bin/sh\n{marker}\nexec {REAL_GIT} "$@"\n'


@pytest.fixture
def sandboxed_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    add_script(path, "commit.sh", COMMIT_AGENT)
    configure(path, {})
    monkeypatch.chdir(path)
    return path


@pytest.mark.parametrize("kind", PATHS)
def test_a_git_in_a_cloned_repository_never_runs(tmp_path: Path, kind: str) -> None:
    """A repository holding an executable `git` at its top and in `bin/`; PATH names one of
    them first: fks's commands run the installed git, never those."""
    marker = tmp_path / "ran"
    fake = own_git(f"touch {marker}")
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n", "git": fake, "bin/git": fake})
    for name in ("git", "bin/git"):
        (repo / name).chmod(0o755)
    for args in (("runs",), ("validate",), ("clean",)):
        done = fks(*args, cwd=repo, env={"PATH": path_for(kind, repo)})
        assert done.code in (0, 2), done.output
        assert "Traceback" not in done.output
    assert not marker.exists()


@pytest.mark.docker
@pytest.mark.parametrize("kind", ["empty entry", "the repository's bin"])
def test_a_git_an_agent_lands_never_runs(sandboxed_repo: Path, tmp_path: Path, kind: str) -> None:
    """The agent lands an executable `git` at the top and in `bin/`; fks, with PATH naming
    one of them first, goes on running git there (the landing, the clean-up, `fks review`):
    never those."""
    host = Host(sandboxed_repo, tmp_path)
    fake = own_git(host.payload("git"))
    body = writing({"git": fake, "bin/git": fake})
    body += f"chmod +x git bin/git && git add -A && git commit -qm 'gits of its own'\n{MARK}\n"
    env = {"PATH": path_for(kind, sandboxed_repo)}
    res = sandbox(host.agent(body) + ":1", env=env)
    assert res.code == 0, res.output[-3000:]
    assert os.access(sandboxed_repo / "bin" / "git", os.X_OK)  # landed
    review = fks("review", record(sandboxed_repo)["id"], "--diff", env=env)
    assert review.code == 0, review.output
    host.check(res, merged=True)


HOOKS = ("post-merge", "reference-transaction", "post-checkout", "post-rewrite")


@pytest.mark.docker
@pytest.mark.parametrize("where", ["core.hooksPath in the work tree", ".git/hooks"])
def test_no_hook_runs_when_a_step_lands(sandboxed_repo: Path, tmp_path: Path, where: str) -> None:
    """The user's hooks live in a tracked folder (`core.hooksPath=.githooks`, as husky and
    many projects set it), or in `.git/hooks` running a tracked script (as pre-commit's do with
    its config): the agent's commit changes them, and the landing that writes them runs none."""
    repo = sandboxed_repo
    host = Host(repo, tmp_path)
    if where == ".git/hooks":
        for hook in HOOKS:
            (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\nexec sh tools/{hook}.sh\n")
            (repo / ".git" / "hooks" / hook).chmod(0o755)
        scripts = {f"tools/{hook}.sh": f"{host.payload(hook)}\n" for hook in HOOKS}
        init = {f"tools/{hook}.sh": "true\n" for hook in HOOKS}
    else:
        git(repo, "config", "core.hooksPath", ".githooks")
        scripts = {f".githooks/{hook}": f"#!/bin/sh\n{host.payload(hook)}\n" for hook in HOOKS}
        init = {}
    for name, text in init.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    if init:
        git(repo, "add", "tools")
        git(repo, "commit", "-qm", "the project's hook scripts")
    body = (
        writing(scripts) + f"chmod +x {' '.join(scripts)} && git add -A && git commit -qm hooks\n"
    )
    res = sandbox(host.agent(body + MARK) + ":1")
    assert res.code == 0, res.output[-3000:]
    assert all((repo / name).is_file() for name in scripts)  # landed in the checkout
    host.check(res, merged=True)
