"""The user's repository as fks uses it: where it is, its branches and identity, the step
branches and leftover refs fks names, and keeping `.forge/` out of git.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.errors import WorkspaceError
from sandbox_runner.git.runner import GitError, git, git_common_dir, git_ok
from sandbox_runner.records.layout import ForgeLayout

BRANCH_PREFIX = "fks"
# Step branches are fks's own bookkeeping: no reflogs for them.
_NO_REFLOG = ("-c", "core.logAllRefUpdates=false")
LEFTOVER_SOURCE = "refs/fks/leftover"
FALLBACK_IDENTITY = ("fks", "fks@localhost")


def exclude_forge_dir(project: Path) -> None:
    """Add `.forge/` to the repository's `info/exclude` (never to a tracked .gitignore)."""
    common = git_common_dir(project)
    if common is None:
        return
    name = ForgeLayout(project).root.name
    exclude = common / "info" / "exclude"
    try:
        current = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    if any(
        line.strip() in (name, f"{name}/", f"/{name}", f"/{name}/") for line in current.splitlines()
    ):
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not current or current.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as out:
        out.write(f"{prefix}# fks run records and step worktrees\n{name}/\n")


# --- repositories ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Repo:
    """A git repository as fks uses it."""

    top: Path
    """Top of the main work tree."""
    common_dir: Path
    """The shared git directory."""

    @property
    def objects(self) -> Path:
        return self.common_dir / "objects"


def open_repo(path: Path, *, what: str = "--sandbox") -> Repo:
    common = git_common_dir(path)
    if common is None:
        raise WorkspaceError(
            f"{what} needs a git repository, and {path} is not in one; run 'git init' and commit first"
        )
    if common.name != ".git":
        raise WorkspaceError(
            f"{what}: bare or unusual repository layout at {common} is not supported"
        )
    repo = Repo(top=common.parent, common_dir=common)
    if not git_ok(repo.top, "rev-parse", "--verify", "-q", "HEAD^{commit}"):
        raise WorkspaceError(
            f"{what}: the repository at {repo.top} has no commits yet; make a first commit"
        )
    return repo


def current_branch(path: Path) -> str | None:
    try:
        return git(path, "symbolic-ref", "-q", "--short", "HEAD") or None
    except GitError:
        return None


def rev(repo: Repo, ref: str) -> str:
    return git(repo.top, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}")


def branch_exists(path: Path, branch: str) -> bool:
    """Whether the repository at `path` has the local branch `branch`."""
    return git_ok(path, "show-ref", "--verify", "-q", f"refs/heads/{branch}")


def checkout_of(repo: Repo, branch: str) -> Path | None:
    """The work tree that has `branch` checked out, if any."""
    listing = git(repo.top, "worktree", "list", "--porcelain")
    path: Path | None = None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}" and path is not None:
            return path
    return None


TASK_FILES = "forge/tasks/"
"""The forge-tasks database, whose statuses `fks forge` moves as uncommitted changes."""


def dirty_tracked(path: Path) -> list[str]:
    """Tracked files with uncommitted changes (staged or not) in the work tree at `path`."""
    out = git(path, "status", "--porcelain=v1", "-z", "--untracked-files=no")
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def dirty_outside_tasks(path: Path) -> list[str]:
    """`dirty_tracked` but the task files: a run may start while fks forge keeps task statuses
    uncommitted (landing never overwrites an uncommitted change: git refuses, the step waits)."""
    return [p for p in dirty_tracked(path) if not p.startswith(TASK_FILES)]


def not_committed(repo: Repo, commit: str, path: Path) -> str | None:
    """Why `path` (in `repo`'s work tree) is not in `commit` and how to fix that; None: it is."""
    rel = path.relative_to(repo.top).as_posix()
    if git_ok(repo.top, "cat-file", "-e", f"{commit}:{rel}"):
        return None
    if git_ok(repo.top, "ls-files", "--error-unmatch", "--", rel):
        return f"{rel} is tracked in this checkout only; commit it on '{commit}'"
    if git_ok(repo.top, "check-ignore", "-q", "--", rel):
        return f"{rel} is ignored by .gitignore; add it anyway and commit it (git add -f {rel} && git commit)"
    return f"{rel} is untracked; commit it (git add {rel} && git commit)"


def identity_env(repo: Repo) -> dict[str, str]:
    """The user's git identity (for commits fks makes and the agent's), with a fallback. Read
    in one git call (every iteration of a sandboxed step asks): the last value of each key,
    as `git config user.name` gives."""
    listing = git(repo.top, "config", "-z", "--get-regexp", r"^user\.(name|email)$", check=False)
    found: dict[str, str] = {}
    for entry in listing.split("\0"):
        key, _, value = entry.partition("\n")
        found[key] = value
    name = found.get("user.name") or os.environ.get("GIT_AUTHOR_NAME") or FALLBACK_IDENTITY[0]
    email = found.get("user.email") or os.environ.get("GIT_AUTHOR_EMAIL") or FALLBACK_IDENTITY[1]
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def require_base(repo: Repo, base: str | None) -> str:
    """The base branch: --base, else the branch checked out; it must exist and be clean."""
    if base is None:
        base = current_branch(repo.top)
        if base is None:
            raise WorkspaceError(
                f"HEAD is detached in {repo.top}; check out a branch or pass --base BRANCH"
            )
    elif not branch_exists(repo.top, base):
        raise WorkspaceError(f"--base {base}: no such branch in {repo.top}")
    checkout = checkout_of(repo, base)
    if checkout is not None:
        dirty = dirty_outside_tasks(checkout)
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise WorkspaceError(
                f"uncommitted changes to tracked files in {checkout} ({shown}); commit or stash them "
                f"first - fks merges finished steps into '{base}' there"
            )
    return base


def step_branch(run_id: str, index: int, agent_slug: str) -> str:
    return f"{BRANCH_PREFIX}/{run_id}/{index}-{agent_slug}"


def leftover_ref(run_id: str, index: int) -> str:
    """Where the commit of an iteration's uncommitted files waits until its step lands."""
    return f"refs/fks/{run_id}/leftover/{index}"


def create_branch(repo: Repo, branch: str, start: str) -> None:
    git(repo.top, *_NO_REFLOG, "update-ref", f"refs/heads/{branch}", start, "")


def delete_branch(repo: Repo, branch: str) -> None:
    git(repo.top, "update-ref", "-d", f"refs/heads/{branch}", check=False)
