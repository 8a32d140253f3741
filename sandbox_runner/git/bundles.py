"""Commits that come out of a sandbox: a bundle fks itself wrote from a Docker API stream is
checked by `git index-pack --strict` before the one step branch (and its leftover ref) may point
at its commits. Nothing here ever runs git in, or reads a path of, a sandbox's workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sandbox_runner.git.repo import _NO_REFLOG, LEFTOVER_SOURCE, Repo, rev
from sandbox_runner.git.runner import GitError, git, run_git

# A bundle's header (its refs) comes before its pack; a longer one is not a bundle fks made.
_MAX_BUNDLE_HEADER = 1024 * 1024


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
        done = run_git(repo.top, "index-pack", "--stdin", "--strict", "--fix-thin", stdin=source)
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
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
