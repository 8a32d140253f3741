"""Commits that come out of a sandbox: a bundle fks itself wrote from a Docker API stream is
checked by `git index-pack --strict` before the one step branch (and its leftover ref) may point
at its commits. Nothing here ever runs git in, or reads a path of, a sandbox's workspace.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sandbox_runner.git.repo import _NO_REFLOG, LEFTOVER_SOURCE, Repo, rev
from sandbox_runner.git.runner import GitError, git, run_git

# A bundle's header (its refs) comes before its pack. fks's own names two refs and the commits
# the host already has (a handful): anything much bigger is not a bundle fks made, and is
# refused before it is read whole.
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_LINES = 1000
_SIGNATURES = {b"# v2 git bundle\n": 2, b"# v3 git bundle\n": 3}
_CAPABILITIES = re.compile(rb"@object-format=(sha1|sha256)")
_OID = re.compile(rb"[0-9a-f]{40}([0-9a-f]{24})?")


@dataclass(frozen=True)
class BundleHeader:
    """What a bundle's header says: the refs it names and where its pack begins."""

    heads: dict[str, str]
    """Ref name to object id."""
    pack_offset: int


def read_header(bundle: Path) -> BundleHeader:
    """Parse a v2/v3 bundle header, reading at most MAX_HEADER_BYTES of it.

    Lines are a signature, v3 capabilities (`@object-format=` only), prerequisites (`-<oid>`)
    and refs (`<oid> <name>`), up to an empty line. Anything else, or a header longer than
    MAX_HEADER_BYTES or MAX_HEADER_LINES lines, is refused (GitError) before more is read.
    """
    heads: dict[str, str] = {}
    width = 40
    with bundle.open("rb") as source:
        lines = _header_lines(source)
        version = _SIGNATURES.get(next(lines, b""))
        if version is None:
            raise GitError("the bundle is not a git bundle (no v2/v3 bundle signature)")
        for line in lines:
            capability = _CAPABILITIES.fullmatch(line[:-1]) if version == 3 else None
            if capability is not None and not heads:
                width = 64 if capability[1] == b"sha256" else 40
                continue
            if line.startswith(b"-") and _is_oid(line[1:-1].partition(b" ")[0], width):
                continue
            oid, _, name = line[:-1].partition(b" ")
            if not _is_oid(oid, width) or not name or b"\0" in name:
                raise GitError("the bundle is not a git bundle (a header line is malformed)")
            heads[name.decode("utf-8", "surrogateescape")] = oid.decode("ascii")
        return BundleHeader(heads=heads, pack_offset=source.tell())


def _is_oid(text: bytes, width: int) -> bool:
    return len(text) == width and _OID.fullmatch(text) is not None


def _header_lines(source: IO[bytes]) -> Iterator[bytes]:
    """The header's lines (each with its newline) before the empty one, bounded."""
    budget = MAX_HEADER_BYTES
    for count in range(MAX_HEADER_LINES + 1):
        line = source.readline(budget + 1)
        budget -= len(line)
        if line == b"\n" and count > 0:
            return
        if budget < 0 or count == MAX_HEADER_LINES:
            raise GitError(
                f"the bundle is not one fks made: its header is over {MAX_HEADER_BYTES} "
                f"bytes or {MAX_HEADER_LINES} lines (refs)"
            )
        if not line.endswith(b"\n"):
            raise GitError("the bundle is not a git bundle (its header does not end)")
        yield line


def import_bundle(repo: Repo, bundle: Path, branch: str, leftover: str) -> list[str]:
    """Take a sandbox's bundle into exactly two refs: the step branch and its leftover ref.

    Its header is read by fks, bounded (`read_header`). Its pack goes through
    `git index-pack --strict` first: every object is parsed and fsck'ed
    (a `.git`-lookalike path or a bad `.gitmodules` is an error) and every link resolved before
    the pack joins the repository. (`git fetch` from a bundle checks nothing in git 2.39,
    whatever `fetch.fsckObjects` says.) Only then may the refs point at commits in it; anything
    else the bundle names (other branches, tags) is never looked at. Returns the refs updated.
    """
    header = read_header(bundle)
    wanted = {f"refs/heads/{branch}": f"refs/heads/{branch}", LEFTOVER_SOURCE: leftover}
    targets = {dst: header.heads[src] for src, dst in wanted.items() if src in header.heads}
    if not targets:
        return []
    _index_strictly(repo, bundle, header.pack_offset)
    for dst, commit in targets.items():
        if git(repo.top, "cat-file", "-t", commit, check=False) != "commit":
            raise GitError(f"the bundle's {dst} is not a commit ({commit[:12]})")
        git(repo.top, "rev-list", "--objects", "--quiet", commit, "--not", "--all")
    for dst, commit in targets.items():
        git(repo.top, *_NO_REFLOG, "update-ref", dst, commit)
    return list(targets)


def _index_strictly(repo: Repo, bundle: Path, offset: int) -> None:
    """Add the bundle's pack to the repository only if every object in it passes fsck."""
    with bundle.open("rb") as source:
        source.seek(offset)
        done = run_git(repo.top, "index-pack", "--stdin", "--strict", "--fix-thin", stdin=source)
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        tail = " / ".join(detail[-3:]) if detail else "no output"
        raise GitError(f"git index-pack --strict refused the bundle's objects: {tail}")


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
