"""Landing a finished step: merging its branch into the base branch (merge-tree, then a
fast-forward) without ever leaving the base half-merged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.git.limits import MergeLimits, measure
from sandbox_runner.git.overwrites import (
    InTheWay,
    changed_files,
    ignored_additions,
    in_the_way,
)
from sandbox_runner.git.repo import Repo, checkout_of, rev
from sandbox_runner.git.runner import GitError, git, git_ok, run_git
from sandbox_runner.records.layout import ForgeLayout

# Conflicting paths beyond the first 64 KiB of their names are not listed.
_MAX_CONFLICT_LIST = 64 * 1024


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


def merge_back(
    repo: Repo,
    base: str,
    branch: str,
    message: str,
    env: Mapping[str, str],
    *,
    kept: Sequence[str] = (),
) -> Landing:
    """Merge `branch` into `base` without ever leaving the base half-merged.

    The merge is computed with `git merge-tree` (no work tree involved); the base then moves by
    a fast-forward, which in a checked-out base updates the user's files the way
    `git merge --ff-only` does: refusing rather than touching anything uncommitted. Before
    that, what the merge would write is measured from git's objects against `MergeLimits`
    (files, bytes, path depth) and for `.forge/` paths and `.gitattributes`; the checkout is
    searched for what git does not track where the merge writes (git would overwrite an
    ignored file, or a folder of them, without a word); and the files `kept` names
    (repository-relative: secrets and CA certificates are read from them) must not change.
    Each refusal leaves the base untouched.
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
    merged = step_tip if fast_forward else _merge_commit(repo, base_tip, step_tip, message, env)
    if isinstance(merged, Landing):
        return merged
    checkout = checkout_of(repo, base)
    refused = _refused(repo, base_tip, merged, kept, checkout)
    if refused:
        return Landing(merged=False, blocked=refused)
    if checkout is None:
        git(repo.top, "update-ref", "-m", f"fks: {message}", f"refs/heads/{base}", merged, base_tip)
    else:
        done = run_git(checkout, "merge", "-q", "--ff-only", "--no-edit", merged, env=env)
        if done.returncode != 0:
            why = _why_blocked(done.stderr.decode("utf-8", "replace"))
            return Landing(merged=False, blocked=why)
    return Landing(merged=True, commit=merged, fast_forward=fast_forward)


def _refused(
    repo: Repo, base_tip: str, merged: str, kept: Sequence[str], checkout: Path | None
) -> str | None:
    """Why moving the base from `base_tip` to `merged` is refused before anything moves: what
    it would write is over the limits, it changes fks's records or a `.gitattributes`, it would
    write over what git does not track in the base's `checkout`, or it changes a file secrets
    are read from (None: it is not)."""
    records = ForgeLayout(repo.top).root.name
    measured = measure(repo, base_tip, merged, MergeLimits.from_env(), records)
    if measured.over:
        return measured.over
    owned = measured.owned
    if owned:
        return (
            f"it changes {owned[0]}{' and more' if len(owned) > 1 else ''}, and {records}/ "
            "holds fks's run records (a merge would replace them); review the branch and merge by hand"
        )
    if measured.attributes:
        changed = _few(measured.attributes, shown=1)
        return (
            f"it changes {changed}{' and more' if len(measured.attributes) > 1 else ''}, "
            "which changes what git writes on checkout beyond what fks measured; review the "
            "branch and merge by hand"
        )
    secret = changed_files(repo, base_tip, merged, kept)
    found = in_the_way(checkout, base_tip, merged, skip=secret) if checkout else InTheWay()
    if secret:
        return _secret_files(secret, found)
    ignored = ignored_additions(checkout, base_tip, merged) if checkout else InTheWay()
    return _not_tracked(found, ignored)


def _not_tracked(found: InTheWay, ignored: InTheWay) -> str | None:
    """Why a landing that would write over the user's files git does not track, or add files
    where the checkout ignores them, is refused (None: it does neither). Moving the files away
    is the fix for the first; only a merge by hand, knowingly, for the second."""
    many = found.count > 1
    parts = []
    if found.count:
        parts.append(
            f"it would overwrite your untracked file{'s' if many else ''} "
            f"{_few(found.paths, total=found.count)}"
        )
    if ignored.count:
        parts.append(
            f"it adds {_few(ignored.paths, total=ignored.count)}, which your checkout ignores "
            "(.gitignore)"
        )
    if not parts:
        return None
    if ignored.count:
        return (
            f"{', and '.join(parts)}: what you ignore stays yours, not the branch's; review the "
            "branch and merge it by hand only if that is meant"
        )
    return f"{parts[0]}; commit, stash or move {'them' if many else 'it'}"


def _secret_files(secret: Sequence[str], found: InTheWay) -> str:
    """Why a landing that changes a file secrets are read from is refused (and what else of
    the user's it would overwrite)."""
    many = found.count > 1
    untracked = f"untracked file{'s' if many else ''} {_few(found.paths, total=found.count)}"
    also = f", and would overwrite your {untracked}" if found.count else ""
    move = (
        f", move {'those' if many else 'that'} file{'s' if many else ''} away"
        if found.count
        else ""
    )
    return (
        f"it changes {_few(secret)}, which sandbox.secrets or sandbox.caCerts read "
        f"(the next run would send what the branch put there){also}; review the branch{move} "
        "and merge it by hand only if that is meant"
    )


def _merge_commit(
    repo: Repo, base_tip: str, step_tip: str, message: str, env: Mapping[str, str]
) -> str | Landing:
    """The merge commit of the two tips, computed by `git merge-tree` with no work tree;
    the conflicting paths' `Landing` when they do not merge cleanly.
    """
    done = run_git(
        repo.top,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        base_tip,
        step_tip,
        limit=_MAX_CONFLICT_LIST,
    )
    lines = done.stdout[:_MAX_CONFLICT_LIST].decode(errors="replace").strip().splitlines()
    if len(done.stdout) > _MAX_CONFLICT_LIST:
        lines = lines[:-1]  # cut short: its last name may be too
    if done.returncode == 1:
        return Landing(merged=False, conflicts=sorted(set(lines[1:])))
    if done.returncode != 0 or not lines:
        raise GitError(
            f"git merge-tree failed (exit {done.returncode}): {done.stderr.decode().strip()}"
        )
    tree = lines[0]
    return git(
        repo.top, "commit-tree", tree, "-p", base_tip, "-p", step_tip, "-m", message, env=env
    )


def _why_blocked(stderr: str) -> str:
    """One line from git's refusal to update a checkout: which of the user's files are in the
    way (git lists them one per line, after a tab, under a heading saying what kind they are),
    and what to do about them."""
    found: dict[str, list[str]] = {"uncommitted": [], "untracked": []}
    kind = "uncommitted"
    for line in stderr.splitlines():
        if line.startswith("\t"):
            found[kind].append(line.strip())
        elif "would be overwritten" in line:
            kind = "untracked" if "untracked" in line else "uncommitted"
    parts = []
    if found["uncommitted"]:
        parts.append(f"uncommitted changes to {_few(found['uncommitted'])}")
    if found["untracked"]:
        many = "s" if len(found["untracked"]) > 1 else ""
        parts.append(f"untracked file{many} {_few(found['untracked'])}")
    if not parts:
        text = " / ".join(line.strip() for line in stderr.splitlines() if line.strip())
        return f"git merge --ff-only failed: {text[:300] or 'no output'}"
    one = len(found["uncommitted"]) + len(found["untracked"]) == 1
    return (
        f"it would overwrite your {' and your '.join(parts)}; "
        f"commit, stash or move {'it' if one else 'them'}"
    )


def _few(paths: Sequence[str], shown: int = 3, total: int | None = None) -> str:
    """The first `shown` of `paths` (of `total`), then `and N more`."""
    names = [_printable(p if len(p) <= 120 else p[:119] + "…") for p in paths[:shown]]
    more = (len(paths) if total is None else total) - shown
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _printable(name: str) -> str:
    """A path the agent named, safe to show: controls, bidi and other format characters
    escaped (then it is quoted)."""
    import unicodedata

    if not any(unicodedata.category(c) in _HIDDEN for c in name):
        return name
    shown = "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        if unicodedata.category(c) in _HIDDEN
        else c
        for c in name
    )
    return f'"{shown}"'


_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp", "Co", "Cn"))
