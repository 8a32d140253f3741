"""Hostile bundles against the host's import and landing (`import_bundle`, then `merge_back`),
with real git in tmp_path: a tiny bundle whose commit would fill the disk once checked out, and
headers that would fill fks's memory. Each attack runs in a process of its own, which reports
its peak RSS; the user's branch, checkout and object store must be untouched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fks_testing.helpers import git, init_repo

BRANCH = "fks/r1/1-agent"
MAX_RSS_MB = 150
# Imports a bundle into the step branch (made at the base first, as a step does) and lands it,
# then prints what happened and the process's own peak RSS.
LAND = """
import json, resource, sys
from pathlib import Path
from sandbox_runner.git.bundles import import_bundle
from sandbox_runner.git.landing import merge_back
from sandbox_runner.git.repo import branch_exists, create_branch, open_repo
from sandbox_runner.git.runner import GitError

repo = open_repo(Path(sys.argv[1]))
if not branch_exists(repo.top, sys.argv[3]):
    create_branch(repo, sys.argv[3], "main")
out = {}
try:
    out["updated"] = import_bundle(repo, Path(sys.argv[2]), sys.argv[3], "refs/fks/r1/leftover/1")
    landing = merge_back(repo, "main", sys.argv[3], "merge", {})
    out.update(merged=landing.merged, blocked=landing.blocked, conflicts=list(landing.conflicts))
except GitError as exc:
    out["error"] = str(exc)
# VmHWM: this process's own peak (ru_maxrss can carry the forking parent's over exec).
status = Path("/proc/self/status").read_text().split("VmHWM:")
peak_kib = int(status[1].split()[0]) if len(status) > 1 else resource.getrusage(
    resource.RUSAGE_SELF
).ru_maxrss
out["rss_mb"] = peak_kib / 1024
print(json.dumps(out))
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


class Snapshot:
    """The user's side before an attack: refs, files in the checkout, objects."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.main = git(repo, "rev-parse", "main")
        self.files = sorted(p.name for p in repo.iterdir())
        self.objects = self._objects()

    def _objects(self) -> str:
        return git(self.repo, "count-objects", "-v")

    def check(self, *, objects_added: bool) -> None:
        assert git(self.repo, "rev-parse", "main") == self.main
        assert sorted(p.name for p in self.repo.iterdir()) == self.files
        assert git(self.repo, "status", "--porcelain") == ""
        assert (self._objects() != self.objects) == objects_added


def land(repo: Path, bundle: Path, **env: str) -> dict[str, object]:
    """Import and land `bundle` in a fresh process; its report (with `rss_mb`)."""
    done = subprocess.run(
        [sys.executable, "-c", LAND, str(repo), str(bundle), BRANCH],
        capture_output=True,
        text=True,
        check=False,
        env={**_environ(), **env},
        timeout=250,
        cwd=repo.parent,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("FKS_MAX_")}


def agent_bundle(repo: Path, tmp_path: Path, tree: Callable[[Path, str], str]) -> Path:
    """The bundle an agent would hand back: one commit on the step branch whose tree is
    `tree(agent_repo, base_tree)`, made from objects only (nothing checked out)."""
    agent = tmp_path / "agent"
    git(tmp_path, "clone", "-q", str(repo), str(agent))
    base = git(agent, "rev-parse", "HEAD")
    top = tree(agent, git(agent, "rev-parse", "HEAD^{tree}"))
    commit = git(agent, "commit-tree", top, "-p", base, "-m", "agent")
    git(agent, "update-ref", f"refs/heads/{BRANCH}", commit)
    bundle = tmp_path / "step.bundle"
    git(agent, "bundle", "create", "-q", str(bundle), f"refs/heads/{BRANCH}", f"^{base}")
    return bundle


def mktree(repo: Path, lines: list[str]) -> str:
    done = subprocess.run(
        ["git", "mktree"],
        cwd=repo,
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def blob(repo: Path, data: bytes) -> str:
    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True
    )
    return done.stdout.decode().strip()


def with_folder(repo: Path, base_tree: str, name: str, tree: str) -> str:
    """`base_tree` plus the folder `name` holding `tree`."""
    entries = git(repo, "ls-tree", base_tree).splitlines()
    return mktree(repo, [*entries, f"040000 tree {tree}\t{name}"])


# --- what a landing would write ----------------------------------------------------------------


@pytest.mark.parametrize("base_moved", [False, True], ids=["fast-forward", "merge-commit"])
def test_one_zero_blob_under_many_names_never_lands(
    repo: Path, tmp_path: Path, base_moved: bool
) -> None:
    """200 names for one MiB of zeros: a bundle of a few KiB, 200 MiB once checked out."""

    def zeros(agent: Path, base_tree: str) -> str:
        zero = blob(agent, bytes(1024 * 1024))
        folder = mktree(agent, [f"100644 blob {zero}\tz{i}" for i in range(200)])
        return with_folder(agent, base_tree, "zeros", folder)

    bundle = agent_bundle(repo, tmp_path, zeros)
    assert bundle.stat().st_size < 64 * 1024
    if base_moved:
        (repo / "mine.txt").write_text("the user's own work\n")
        git(repo, "add", "mine.txt")
        git(repo, "commit", "-qm", "mine")
    before = Snapshot(repo)
    report = land(repo, bundle, FKS_MAX_MERGE_BYTES=str(64 * 1024 * 1024))
    assert report["merged"] is False, report
    assert "FKS_MAX_MERGE_BYTES" in str(report["blocked"]), report
    before.check(objects_added=True)  # the step's own objects, kept with its branch
    assert git(repo, "ls-tree", "--name-only", BRANCH).splitlines() == ["README.md", "zeros"]


def test_a_subtree_repeated_at_every_level_is_refused_without_walking_it(
    repo: Path, tmp_path: Path
) -> None:
    """1,000 names for one folder at each of 10 levels: 10^30 files, with the default limits."""

    def bomb(agent: Path, base_tree: str) -> str:
        tree = mktree(agent, [f"100644 blob {blob(agent, b'x')}\tf{i}" for i in range(1000)])
        for _level in range(9):
            tree = mktree(agent, [f"040000 tree {tree}\td{i}" for i in range(1000)])
        return with_folder(agent, base_tree, "bomb", tree)

    bundle = agent_bundle(repo, tmp_path, bomb)
    before = Snapshot(repo)
    report = land(repo, bundle)
    assert report["merged"] is False, report
    assert "more than 100000 files and folders (FKS_MAX_MERGE_FILES)" in str(report["blocked"]), (
        report
    )
    assert float(str(report["rss_mb"])) < MAX_RSS_MB, report
    before.check(objects_added=True)


def test_more_files_than_the_limit_do_not_land(repo: Path, tmp_path: Path) -> None:
    def many(agent: Path, base_tree: str) -> str:
        empty = blob(agent, b"")
        folder = mktree(agent, [f"100644 blob {empty}\tf{i}" for i in range(3000)])
        return with_folder(agent, base_tree, "many", folder)

    bundle = agent_bundle(repo, tmp_path, many)
    before = Snapshot(repo)
    report = land(repo, bundle, FKS_MAX_MERGE_FILES="2000")
    assert report["merged"] is False, report
    assert "FKS_MAX_MERGE_FILES" in str(report["blocked"]), report
    before.check(objects_added=True)
    # Under the limit, the same step lands.
    assert land(repo, bundle, FKS_MAX_MERGE_FILES="3001")["merged"] is True
    assert len(list((repo / "many").iterdir())) == 3000


def test_paths_deeper_than_the_limit_do_not_land(repo: Path, tmp_path: Path) -> None:
    def deep(agent: Path, base_tree: str) -> str:
        tree = mktree(agent, [f"100644 blob {blob(agent, b'bottom')}\tf"])
        for _level in range(150):
            tree = mktree(agent, [f"040000 tree {tree}\td"])
        return with_folder(agent, base_tree, "deep", tree)

    bundle = agent_bundle(repo, tmp_path, deep)
    before = Snapshot(repo)
    report = land(repo, bundle)
    assert report["merged"] is False, report
    assert "over 100 names deep (FKS_MAX_MERGE_DEPTH)" in str(report["blocked"]), report
    before.check(objects_added=True)


def test_paths_no_system_can_make_do_not_land_even_on_a_base_not_checked_out(
    repo: Path, tmp_path: Path
) -> None:
    """20 folders of 250-byte names: 5,000 bytes, past PATH_MAX, within the depth limit."""

    def long(agent: Path, base_tree: str) -> str:
        tree = mktree(agent, [f"100644 blob {blob(agent, b'bottom')}\tf"])
        for level in range(20):
            tree = mktree(agent, [f"040000 tree {tree}\t{chr(97 + level) * 250}"])
        return with_folder(agent, base_tree, "long", tree)

    bundle = agent_bundle(repo, tmp_path, long)
    git(repo, "switch", "-q", "-c", "elsewhere")
    before = Snapshot(repo)
    report = land(repo, bundle, FKS_MAX_MERGE_DEPTH="500")
    assert report["merged"] is False, report
    assert "paths over 4096 bytes long, which fks never merges" in str(report["blocked"]), report
    before.check(objects_added=True)


@pytest.mark.parametrize("where", [".gitattributes", "sub/.gitattributes"])
def test_attributes_that_blow_up_a_checkout_do_not_land(
    repo: Path, tmp_path: Path, where: str
) -> None:
    """`ident`, `eol=crlf` and `working-tree-encoding=UTF-32LE` make git write 2.3 MB for a
    blob of 60 KB: a step that adds, changes or removes a `.gitattributes` never lands by
    itself, so the limits bound what a checkout writes."""
    rules = b"*.txt ident text eol=crlf working-tree-encoding=UTF-32LE\n"

    def blow_up(agent: Path, base_tree: str) -> str:
        big = blob(agent, b"$Id$\n" * 12_000)
        folder = f"100644 blob {blob(agent, rules)}\t.gitattributes"
        if where == ".gitattributes":
            entries = git(agent, "ls-tree", base_tree).splitlines()
            return mktree(agent, [*entries, folder, f"100644 blob {big}\ta.txt"])
        return with_folder(
            agent, base_tree, "sub", mktree(agent, [folder, f"100644 blob {big}\ta.txt"])
        )

    bundle = agent_bundle(repo, tmp_path, blow_up)
    before = Snapshot(repo)
    report = land(repo, bundle, FKS_MAX_MERGE_BYTES=str(256 * 1024))
    assert report["merged"] is False, report
    assert f"it changes {where}, which changes what git writes on checkout" in str(
        report["blocked"]
    ), report
    before.check(objects_added=True)
    assert not (repo / "a.txt").exists() and not (repo / "sub").exists()


# --- bundle headers ----------------------------------------------------------------------------


def hostile_header(repo: Path, tmp_path: Path, lines: Callable[[str], Iterator[bytes]]) -> Path:
    """A bundle whose header has `lines(tip)` after a real step-branch ref, then a real pack
    (written as it is made: the test holds none of it)."""
    made = agent_bundle(repo, tmp_path, lambda agent, base_tree: base_tree)
    data = made.read_bytes()
    end = data.index(b"\n\n") + 1
    head, pack = data[:end], data[end:]
    tip = head.split(b"\n")[-2].split(b" ")[0].decode()
    bundle = tmp_path / "hostile.bundle"
    with bundle.open("wb") as out:
        out.write(head)
        for block in lines(tip):
            out.write(block)
        out.write(pack)
    return bundle


def test_a_header_naming_millions_of_refs_is_refused_in_bounded_memory(
    repo: Path, tmp_path: Path
) -> None:
    def refs(tip: str) -> Iterator[bytes]:
        for start in range(0, 2_750_000, 10_000):  # 2.75 million refs, 157 MiB
            yield b"".join(f"{tip} refs/tags/t{start + i:07d}\n".encode() for i in range(10_000))

    bundle = hostile_header(repo, tmp_path, refs)
    assert bundle.stat().st_size > 157 * 1024 * 1024
    before = Snapshot(repo)
    report = land(repo, bundle)
    assert "its header is over" in str(report.get("error")), report
    assert float(str(report["rss_mb"])) < MAX_RSS_MB, report
    before.check(objects_added=False)
    assert git(repo, "rev-parse", BRANCH) == before.main


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(
            lambda tip: f"{tip} refs/heads/".encode() + b"x" * (64 * 1024 * 1024), id="ref"
        ),
        pytest.param(lambda tip: b"-" + b"f" * (64 * 1024 * 1024), id="prerequisite"),
    ],
)
def test_a_huge_header_line_is_refused_in_bounded_memory(
    repo: Path, tmp_path: Path, line: Callable[[str], bytes]
) -> None:
    bundle = hostile_header(repo, tmp_path, lambda tip: iter([line(tip), b"\n"]))
    before = Snapshot(repo)
    report = land(repo, bundle)
    assert "its header is over" in str(report.get("error")), report
    assert float(str(report["rss_mb"])) < MAX_RSS_MB, report
    before.check(objects_added=False)


# --- git's output --------------------------------------------------------------------------------

READ = """
import json, sys
from pathlib import Path
from sandbox_runner.git.runner import GitError, git

out = {}
try:
    out["read"] = len(git(Path(sys.argv[1]), "cat-file", "blob", sys.argv[2]))
except GitError as exc:
    out["error"] = str(exc)
status = Path("/proc/self/status").read_text().split("VmHWM:")[1]
out["rss_mb"] = int(status.split()[0]) / 1024
print(json.dumps(out))
"""


def test_git_output_the_agent_controls_is_read_in_bounded_memory(repo: Path) -> None:
    """A 200 MiB file the agent committed, printed by git: refused past 16 MiB, not read whole."""
    made = subprocess.run(
        f"head -c {200 * 1024 * 1024} /dev/zero | git hash-object -w --stdin",
        shell=True,
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    done = subprocess.run(
        [sys.executable, "-c", READ, str(repo), made.stdout.strip()],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo.parent,
    )
    report = json.loads(done.stdout)
    assert "printed more than 16777216 bytes" in str(report.get("error")), report
    assert report["rss_mb"] < MAX_RSS_MB, report
