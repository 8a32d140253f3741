"""Git for sandboxed runs: step branches and worktrees, the staged refs and objects an agent
may write, committing leftovers, and merging a finished step back into its base branch.

Ref safety is structural: the container sees the repository's git directory read-only. What
a step may write is mounted over it: its worktree's admin directory, a staging directory
standing in for `refs/heads/fks/<run-id>/` that holds only the step's own branch, and an
object directory of its own (the real one is an alternate). After each iteration fks moves
the new objects in and advances the step branch; nothing else can have moved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_runner.errors import WorkspaceError
from sandbox_runner.progress import git_common_dir

FORGE_EXCLUDE = ".forge/"
BRANCH_PREFIX = "fks"
# fks never writes reflogs for step branches: the container could not append to them.
_NO_REFLOG = ("-c", "core.logAllRefUpdates=false")
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


# --- the worktree a run's steps share ---------------------------------------------------------


class RunWorktree:
    """One worktree per run and repository, at `.forge/worktrees/<run-id>`.

    Each step checks out its own new branch in it; switching from the previous step's branch
    rewrites only the files that differ, so steps after the first cost O(files changed).
    """

    def __init__(self, repo: Repo, run_id: str) -> None:
        self.repo = repo
        self.run_id = run_id
        self.path = repo.top / ".forge" / "worktrees" / run_id

    @property
    def admin_dir(self) -> Path:
        """The worktree's private git directory (`.git/worktrees/<name>`)."""
        pointer = (self.path / ".git").read_text(encoding="utf-8").strip()
        return Path(pointer.removeprefix("gitdir: ").strip())

    def registered(self) -> bool:
        listing = git(self.repo.top, "worktree", "list", "--porcelain")
        return f"worktree {self.path}" in listing.splitlines() and (self.path / ".git").is_file()

    def check_out(self, branch: str, start: str | None) -> Path:
        """Put `branch` in the worktree: created at `start`, or an existing branch (resume)."""
        if not self.registered():
            if self.path.exists():
                shutil.rmtree(self.path)
            git(self.repo.top, "worktree", "prune")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if start is not None:
                git(
                    self.repo.top,
                    *_NO_REFLOG,
                    "worktree",
                    "add",
                    "-q",
                    "--no-track",
                    "-b",
                    branch,
                    str(self.path),
                    start,
                )
            else:
                git(self.repo.top, *_NO_REFLOG, "worktree", "add", "-q", str(self.path), branch)
            return self.path
        if start is None and current_branch(self.path) == branch:
            return self.path  # resuming the interrupted step: keep its work tree as it was left
        # Recycle: the previous step landed, so its tree is clean (leftovers were committed);
        # a fresh workspace also drops ignored files. Switching branches then rewrites only the
        # files that differ.
        git(self.path, "clean", "-q", "-ffdx")
        switch = (
            ["checkout", "-q", "--no-track", "-b", branch, start]
            if start is not None
            else ["checkout", "-q", branch]
        )
        try:
            git(self.path, *_NO_REFLOG, *switch)
        except GitError:
            git(self.path, "reset", "-q", "--hard")
            git(self.path, *_NO_REFLOG, *switch)
        return self.path

    def remove(self) -> None:
        if self.path.exists() or self.registered():
            git(self.repo.top, "worktree", "remove", "--force", str(self.path), check=False)
            if self.path.exists():
                shutil.rmtree(self.path, ignore_errors=True)
        git(self.repo.top, "worktree", "prune", check=False)


# --- what a container may write -----------------------------------------------------------------


@dataclass
class Staging:
    """Host directories mounted over the read-only git directory for one step."""

    repo: Repo
    worktree: RunWorktree
    branch: str
    root: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def ref_dir(self) -> Path:
        """`refs/heads/fks/<run-id>/` in the real git directory."""
        return self.repo.common_dir / "refs" / "heads" / Path(self.branch).parent

    @property
    def log_dir(self) -> Path:
        return self.repo.common_dir / "logs" / "refs" / "heads" / Path(self.branch).parent

    @property
    def leaf(self) -> str:
        return Path(self.branch).name

    @property
    def refs(self) -> Path:
        return self.root / "refs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    def prepare(self) -> None:
        """Before an iteration: mount points exist, the staged ref equals the real one."""
        for directory in (self.refs, self.logs, self.objects / "pack", self.ref_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for stale in self.refs.iterdir():
            if stale.is_file():
                stale.unlink()
        (self.refs / self.leaf).write_text(rev(self.repo, self.branch) + "\n", encoding="utf-8")

    def mounts(self) -> list[tuple[str, str, bool]]:
        """(source, target, read_only) for the container, same absolute paths where possible."""
        return [
            (str(self.worktree.path), str(self.worktree.path), False),
            (str(self.repo.common_dir), str(self.repo.common_dir), True),
            (str(self.worktree.admin_dir), str(self.worktree.admin_dir), False),
            (str(self.refs), str(self.ref_dir), False),
            (str(self.logs), str(self.log_dir), False),
            (str(self.objects), str(self.objects), False),
        ]

    def env(self) -> dict[str, str]:
        """Git settings inside the container: write objects to our directory, no reflogs, no gc."""
        settings = {"core.logAllRefUpdates": "false", "gc.auto": "0", "maintenance.auto": "false"}
        env = {
            "GIT_OBJECT_DIRECTORY": str(self.objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.repo.objects),
            "GIT_CONFIG_COUNT": str(len(settings)),
        }
        for i, (key, value) in enumerate(settings.items()):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        return env

    def sync(self) -> list[str]:
        """After an iteration: move new objects in, advance the step branch. Returns warnings."""
        warnings: list[str] = []
        _move_objects(self.objects, self.repo.objects)
        staged_file = self.refs / self.leaf
        before = rev(self.repo, self.branch)
        staged = staged_file.read_text(encoding="utf-8").strip() if staged_file.is_file() else ""
        if not staged:
            warnings.append(f"the agent deleted its branch {self.branch}; kept it at {before[:12]}")
            staged = before
        head = (self.worktree.admin_dir / "HEAD").read_text(encoding="utf-8").strip()
        on_branch = head == f"ref: refs/heads/{self.branch}"
        if not on_branch:
            detached = "" if head.startswith("ref:") else head
            if detached and git_ok(self.repo.top, "merge-base", "--is-ancestor", staged, detached):
                staged = detached  # commits made on a detached HEAD still count
            warnings.append(
                f"the agent left HEAD off its branch ({head[:60]}); put it back on {self.branch}"
            )
        if staged != before:
            if not git_ok(self.repo.top, "cat-file", "-e", f"{staged}^{{commit}}"):
                warnings.append(
                    f"the agent's branch points at a missing commit {staged[:12]}; ignored"
                )
            else:
                git(
                    self.repo.top,
                    *_NO_REFLOG,
                    "update-ref",
                    f"refs/heads/{self.branch}",
                    staged,
                    before,
                )
        if not on_branch:
            git(self.worktree.path, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
        return warnings

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def salvage_staging(repo: Repo, root: Path, branch: str) -> bool:
    """Keep what a killed run's agent committed: move its objects in and advance its branch.

    Only a fast-forward of the step branch is applied. Returns True when the branch moved.
    """
    _move_objects(root / "objects", repo.objects)
    staged_file = root / "refs" / Path(branch).name
    if not staged_file.is_file() or not branch_exists(repo, branch):
        return False
    staged = staged_file.read_text(encoding="utf-8").strip()
    current = rev(repo, branch)
    if not staged or staged == current:
        return False
    if not git_ok(repo.top, "cat-file", "-e", f"{staged}^{{commit}}"):
        return False
    if not git_ok(repo.top, "merge-base", "--is-ancestor", current, staged):
        return False
    git(repo.top, *_NO_REFLOG, "update-ref", f"refs/heads/{branch}", staged, current)
    return True


def _move_objects(source: Path, target: Path) -> None:
    """Move loose objects and packs written by the container into the real object store."""
    if not source.is_dir():
        return
    for folder in source.iterdir():
        if folder.name == "pack" or folder.name == "info" or not folder.is_dir():
            continue
        destination = target / folder.name
        for obj in folder.iterdir():
            final = destination / obj.name
            if final.exists():
                obj.unlink()
                continue
            destination.mkdir(exist_ok=True)
            _move(obj, final)
    packs = source / "pack"
    if packs.is_dir():
        # Indexes after packs: git only looks at a pack once its .idx exists.
        for suffix in (".pack", ".rev", ".idx"):
            for item in packs.glob(f"*{suffix}"):
                final = target / "pack" / item.name
                if final.exists():
                    item.unlink()
                else:
                    _move(item, final)


def _move(source: Path, target: Path) -> None:
    try:
        source.replace(target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)
        source.unlink()


# --- landing a step -------------------------------------------------------------------------------


def commit_leftovers(worktree: Path, message: str, env: Mapping[str, str]) -> str | None:
    """Commit whatever the agent left uncommitted (untracked files too, ignores respected)."""
    if not git(worktree, "status", "--porcelain=v1", "--untracked-files=all"):
        return None
    git(worktree, "add", "-A", env=env)
    git(worktree, *_NO_REFLOG, "commit", "-q", "--no-verify", "-m", message, env=env)
    return git(worktree, "rev-parse", "HEAD")


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


def merge_back(repo: Repo, base: str, branch: str, message: str, env: Mapping[str, str]) -> Landing:
    """Merge `branch` into `base` without ever leaving the base half-merged.

    The merge is computed with `git merge-tree` (no work tree involved); the base then moves by
    a fast-forward, which in a checked-out base updates the user's files the way
    `git merge --ff-only` does: refusing rather than touching anything uncommitted.
    """
    base_tip = rev(repo, base)
    step_tip = rev(repo, branch)
    if git_ok(repo.top, "merge-base", "--is-ancestor", step_tip, base_tip):
        return Landing(merged=True, commit=base_tip)
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
    checkout = checkout_of(repo, base)
    if checkout is None:
        git(repo.top, "update-ref", "-m", f"fks: {message}", f"refs/heads/{base}", new, base_tip)
        return Landing(merged=True, commit=new, fast_forward=fast_forward)
    try:
        git(checkout, "merge", "-q", "--ff-only", "--no-edit", new, env=env)
    except GitError as exc:
        return Landing(merged=False, blocked=str(exc))
    return Landing(merged=True, commit=new, fast_forward=fast_forward)
