"""Host-side git for sandboxed runs: the user's repository, step branches, importing what a
sandbox produced, and merging a finished step back into its base branch.

Nothing here ever runs git in, or reads a path of, a sandbox's workspace: commits arrive as a
bundle file that fks itself wrote from a Docker API stream, and `git index-pack --strict` checks
every object before the one step branch (and its leftover ref) may point at them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.errors import WorkspaceError
from sandbox_runner.git.runner import git_common_dir

FORGE_EXCLUDE = ".forge/"
BRANCH_PREFIX = "fks"
# Step branches are fks's own bookkeeping: no reflogs for them.
_NO_REFLOG = ("-c", "core.logAllRefUpdates=false")
# A bundle's header (its refs) comes before its pack; a longer one is not a bundle fks made.
_MAX_BUNDLE_HEADER = 1024 * 1024
LEFTOVER_SOURCE = "refs/fks/leftover"
FALLBACK_IDENTITY = ("fks", "fks@localhost")


class GitError(WorkspaceError):
    """A git command failed (message carries argv, exit code and stderr)."""


def git(cwd: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """Run git; returns stdout stripped. Raises GitError naming the command on failure."""
    from git.cmd import Git

    runner = Git(str(cwd))
    status, out, err = runner.execute(
        ["git", *args],
        with_extended_output=True,
        with_exceptions=False,
        env={**os.environ, "LC_ALL": "C", **(env or {})},
        strip_newline_in_stdout=True,
    )
    if check and status != 0:
        detail = (err or out or "").strip().splitlines()
        tail = " / ".join(detail[-3:]) if detail else "no output"
        raise GitError(f"git {' '.join(args)} failed in {cwd} (exit {status}): {tail}")
    return str(out)


def git_ok(cwd: Path, *args: str) -> bool:
    try:
        git(cwd, *args)
    except GitError:
        return False
    return True


def exclude_forge_dir(project: Path) -> None:
    """Add `.forge/` to the repository's `info/exclude` (never to a tracked .gitignore)."""
    common = git_common_dir(project)
    if common is None:
        return
    exclude = common / "info" / "exclude"
    try:
        current = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    if any(
        line.strip() in (".forge", ".forge/", "/.forge", "/.forge/")
        for line in current.splitlines()
    ):
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not current or current.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as out:
        out.write(f"{prefix}# fks run records and step worktrees\n{FORGE_EXCLUDE}\n")


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


def branch_exists(repo: Repo, branch: str) -> bool:
    return git_ok(repo.top, "show-ref", "--verify", "-q", f"refs/heads/{branch}")


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


def dirty_tracked(path: Path) -> list[str]:
    """Tracked files with uncommitted changes (staged or not) in the work tree at `path`."""
    out = git(path, "status", "--porcelain=v1", "-z", "--untracked-files=no")
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def identity_env(repo: Repo) -> dict[str, str]:
    """The user's git identity (for commits fks makes and the agent's), with a fallback."""
    name = (
        git(repo.top, "config", "user.name", check=False)
        or os.environ.get("GIT_AUTHOR_NAME")
        or FALLBACK_IDENTITY[0]
    )
    email = (
        git(repo.top, "config", "user.email", check=False)
        or os.environ.get("GIT_AUTHOR_EMAIL")
        or FALLBACK_IDENTITY[1]
    )
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
    elif not branch_exists(repo, base):
        raise WorkspaceError(f"--base {base}: no such branch in {repo.top}")
    checkout = checkout_of(repo, base)
    if checkout is not None:
        dirty = dirty_tracked(checkout)
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise WorkspaceError(
                f"uncommitted changes to tracked files in {checkout} ({shown}); commit or stash them "
                f"first - fks merges finished steps into '{base}' there"
            )
    return base


def step_branch(run_id: str, index: int, agent_slug: str) -> str:
    return f"{BRANCH_PREFIX}/{run_id}/{index}-{agent_slug}"


# --- commits that come out of a sandbox -----------------------------------------------------------


def leftover_ref(run_id: str, index: int) -> str:
    """Where the commit of an iteration's uncommitted files waits until its step lands."""
    return f"refs/fks/{run_id}/leftover/{index}"


def create_branch(repo: Repo, branch: str, start: str) -> None:
    git(repo.top, *_NO_REFLOG, "update-ref", f"refs/heads/{branch}", start, "")


def delete_branch(repo: Repo, branch: str) -> None:
    git(repo.top, "update-ref", "-d", f"refs/heads/{branch}", check=False)


def import_bundle(repo: Repo, bundle: Path, branch: str, leftover: str) -> list[str]:
    """Take a sandbox's bundle into exactly two refs: the step branch and its leftover ref.

    Its pack goes through `git index-pack --strict` first: every object is parsed and fsck'ed
    (a `.git`-lookalike path or a bad `.gitmodules` is an error) and every link resolved before
    the pack joins the repository. (`git fetch` from a bundle checks nothing in git 2.39,
    whatever `fetch.fsckObjects` says.) Only then may the refs point at commits in it; anything
    else the bundle names (other branches, tags) is never looked at. Returns the refs updated.
    """
    heads = bundle_heads(repo, bundle)
    wanted = {f"refs/heads/{branch}": f"refs/heads/{branch}", LEFTOVER_SOURCE: leftover}
    targets = {dst: heads[src] for src, dst in wanted.items() if src in heads}
    if not targets:
        return []
    _index_strictly(repo, bundle)
    for dst, commit in targets.items():
        if git(repo.top, "cat-file", "-t", commit, check=False) != "commit":
            raise GitError(f"the bundle's {dst} is not a commit ({commit[:12]})")
        git(repo.top, "rev-list", "--objects", "--quiet", commit, "--not", "--all")
    for dst, commit in targets.items():
        git(repo.top, *_NO_REFLOG, "update-ref", dst, commit)
    return list(targets)


def _index_strictly(repo: Repo, bundle: Path) -> None:
    """Add the bundle's pack to the repository only if every object in it passes fsck."""
    with bundle.open("rb") as source:
        end = source.read(_MAX_BUNDLE_HEADER).find(b"\n\n")
        if end < 0:
            raise GitError(f"{bundle} is not a git bundle (its header does not end)")
        source.seek(end + 2)
        done = subprocess.run(
            ["git", "index-pack", "--stdin", "--strict", "--fix-thin"],
            cwd=repo.top,
            stdin=source,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            env={**os.environ, "LC_ALL": "C"},
        )
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()
        tail = " / ".join(detail[-3:]) if detail else "no output"
        raise GitError(f"git index-pack --strict refused the bundle's objects: {tail}")


def bundle_heads(repo: Repo, bundle: Path) -> dict[str, str]:
    """The refs a bundle names (git parses and checks its header)."""
    out = git(repo.top, "bundle", "list-heads", str(bundle))
    heads: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, name = line.partition(" ")
        heads[name] = sha
    return heads


def apply_leftover(
    repo: Repo, branch: str, ref: str, message: str, env: Mapping[str, str]
) -> str | None:
    """Put the files a step left uncommitted on its branch, as one commit, and drop `ref`.

    Only a commit whose parent is the branch tip counts (anything else is stale). Returns the
    new commit, or None when there was nothing to add.
    """
    found = git(repo.top, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
    if not found:
        return None
    git(repo.top, "update-ref", "-d", ref, check=False)
    tip = rev(repo, branch)
    parent = git(repo.top, "rev-parse", "-q", "--verify", f"{found}^1", check=False)
    tree = git(repo.top, "rev-parse", f"{found}^{{tree}}")
    if parent != tip or tree == git(repo.top, "rev-parse", f"{tip}^{{tree}}"):
        return None
    commit = git(repo.top, "commit-tree", tree, "-p", tip, "-m", message, env=env)
    git(repo.top, *_NO_REFLOG, "update-ref", f"refs/heads/{branch}", commit, tip)
    return commit


def drop_run_refs(repo: Repo, run_id: str) -> None:
    """Remove the hidden refs a run kept (leftover commits nobody landed)."""
    refs = git(repo.top, "for-each-ref", "--format=%(refname)", f"refs/fks/{run_id}/", check=False)
    for ref in refs.splitlines():
        git(repo.top, "update-ref", "-d", ref, check=False)


# --- landing a step -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Landing:
    """The result of merging a step branch into its base."""

    merged: bool
    commit: str | None = None
    """The base branch's new tip (or its unchanged tip when there was nothing to merge)."""
    fast_forward: bool = False
    conflicts: Sequence[str] = ()
    blocked: str | None = None
    """Why the base could not be updated (e.g. untracked files would be overwritten)."""
    nothing_new: bool = False
    """The base already had every commit of the step."""


def merge_back(repo: Repo, base: str, branch: str, message: str, env: Mapping[str, str]) -> Landing:
    """Merge `branch` into `base` without ever leaving the base half-merged.

    The merge is computed with `git merge-tree` (no work tree involved); the base then moves by
    a fast-forward, which in a checked-out base updates the user's files the way
    `git merge --ff-only` does: refusing rather than touching anything uncommitted.
    """
    base_tip = rev(repo, base)
    step_tip = rev(repo, branch)
    if git_ok(repo.top, "merge-base", "--is-ancestor", step_tip, base_tip):
        return Landing(merged=True, commit=base_tip, nothing_new=True)
    if not git_ok(repo.top, "merge-base", base_tip, step_tip):
        return Landing(
            merged=False,
            blocked=f"{branch} shares no history with '{base}' (it was replaced); review it and merge by hand",
        )
    fast_forward = git_ok(repo.top, "merge-base", "--is-ancestor", base_tip, step_tip)
    if fast_forward:
        new = step_tip
    else:
        done = subprocess.run(
            [
                "git",
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                base_tip,
                step_tip,
            ],
            cwd=repo.top,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode == 1:
            return Landing(merged=False, conflicts=sorted(set(lines[1:])))
        if done.returncode != 0 or not lines:
            raise GitError(f"git merge-tree failed (exit {done.returncode}): {done.stderr.strip()}")
        tree = lines[0]
        new = git(
            repo.top, "commit-tree", tree, "-p", base_tip, "-p", step_tip, "-m", message, env=env
        )
    owned = _fks_paths(repo, base_tip, new)
    if owned:
        return Landing(
            merged=False,
            blocked=f"it changes {owned[0]}{' and more' if len(owned) > 1 else ''}, and {FORGE_EXCLUDE} "
            "holds fks's run records (a merge would replace them); review the branch and merge by hand",
        )
    checkout = checkout_of(repo, base)
    if checkout is None:
        git(repo.top, "update-ref", "-m", f"fks: {message}", f"refs/heads/{base}", new, base_tip)
        return Landing(merged=True, commit=new, fast_forward=fast_forward)
    try:
        git(checkout, "merge", "-q", "--ff-only", "--no-edit", new, env=env)
    except GitError as exc:
        return Landing(merged=False, blocked=str(exc))
    return Landing(merged=True, commit=new, fast_forward=fast_forward)


def _fks_paths(repo: Repo, base_tip: str, new: str) -> list[str]:
    """Paths under a `.forge` directory (fks's ignored run records) that a merge would change.

    Git treats ignored files as expendable: a fast-forward would replace the records, or the
    whole directory by a symlink that fks then writes through.
    """
    out = git(repo.top, "diff-tree", "-r", "-z", "--name-only", "--no-renames", base_tip, new)
    name = FORGE_EXCLUDE.strip("/")
    return [
        path
        for path in out.split("\0")
        if path and any(part.lower().rstrip(". ") == name for part in path.split("/"))
    ]
