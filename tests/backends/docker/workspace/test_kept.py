"""A workspace kept between runs (`sandbox.keepWorkspace`) against an agent that poisons it:
the next run's step still gets exactly its commit, nothing reaches the host, one run at a time
holds it, and `fks clean` removes it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.attacks import DIRTY_AGENT, Host, check_agent, outside_repo
from fks_testing.helpers import agent_lines, fks, git
from fks_testing.sandboxed import add_script, configure, kept_name, of_repo, sandbox

from sandbox_runner.backends.docker.workspace.kept import held, read_state
from sandbox_runner.git.repo import open_repo

pytestmark = pytest.mark.docker

# Beyond what DIRTY_AGENT leaves (a forged index, swapped folders, ignored files, a nested
# repository, hooks, hostile config, a poisoned local object): foreign refs, a tracked file
# replaced by a link out of the workspace, a huge ignored file, and links in .git.
MORE_POISON = """
git update-ref refs/heads/main HEAD && git update-ref refs/tags/v1 HEAD
git update-ref refs/heads/evil HEAD
rm linked.txt && ln -s /etc/passwd linked.txt && git update-index --assume-unchanged linked.txt
head -c 64000000 /dev/zero > cache/huge
ln -s /etc .git/refs/etc && ln -sf /etc/shadow .git/fks-export
git config core.fsmonitor 'PAYLOAD'
"""

# The agent's index split its own way (a new shared index at every write, none ever expired),
# shared indexes it cannot read, and entries of that name that are no index: a folder, a FIFO,
# the name git gives the shared index of a whole index as a link out of the workspace.
SPLIT_POISON = """
git config core.splitIndex true && git config splitIndex.maxPercentChange 0
git config splitIndex.sharedIndexExpire never && git update-index --split-index
chmod 000 .git/sharedindex.*
mkdir .git/sharedindex.dir && mkfifo .git/sharedindex.fifo
ln -s /etc/passwd .git/sharedindex.0000000000000000000000000000000000000000
"""
# The base index itself made split, its shared index planted beside it.
SPLIT_BASE = """
GIT_INDEX_FILE=.git/fks-base-index git -c core.splitIndex=true update-index --split-index
"""


@pytest.fixture
def kept_repo(repo: Path) -> Iterator[Path]:
    for name, content in {
        "untouched.txt": "same\n",
        "racy.txt": "racy\n",
        "linked.txt": "linked\n",
        "dir1/f": "one\n",
        "dir2/f": "two\n",
        ".gitignore": "*.log\ncache/\n",
    }.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files to dirty")
    configure(repo, {"sandbox": {"keepWorkspace": True, "network": "none"}})
    yield repo
    for name in of_repo("volume", repo):
        subprocess.run(["docker", "volume", "rm", "-f", name], check=False)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(MORE_POISON, id="base-index-kept"),
        pytest.param("cp .git/index .git/fks-base-index", id="base-index-replaced"),
        pytest.param(SPLIT_POISON, id="split-index-poisoned"),
        pytest.param(SPLIT_BASE, id="base-index-split"),
    ],
)
def test_a_poisoned_kept_workspace_cannot_reach_the_next_run(
    kept_repo: Path, host: Host, tamper: str
) -> None:
    """Two runs poison the kept workspace in ways their exports miss; a third run's step finds
    exactly its commit and a git dir of fks's making, the files nobody changed never rewritten
    (unless the base index was touched: then all are). Nothing ran on the host, no ref of the
    user's moved, and `fks clean` removes the volume."""
    repo = kept_repo
    tamper = tamper.replace("PAYLOAD", host.payload("fsmonitor"))
    add_script(repo, "dirty.sh", DIRTY_AGENT.replace("TAMPER", tamper))
    add_script(
        repo,
        "check.sh",
        check_agent(
            "README.md racy.txt linked.txt dir1/f dir2/f", r"hello\nracy\nlinked\none\ntwo"
        ),
    )
    host.agent("true")  # the host as it is before the runs
    main, tags = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "v1")
    outputs = []
    for agent in ("dirty", "dirty", "check"):
        res = sandbox(f"./scripts/{agent}.sh:1")
        assert res.code == 0, res.output[-3000:]
        outputs.append(res.stdout)
    assert "CHECK-DONE" in outputs[2] and "CHECK-FAIL" not in outputs[2], outputs[2][-3000:]
    assert f"HEAD {main}" in outputs[2]
    assert git(repo, "rev-parse", "main") == main and git(repo, "rev-parse", "v1") == tags
    assert "evil" not in git(repo, "branch", "--list")
    assert not (repo / "HOOKED.log").exists()
    assert list(host.markers.iterdir()) == []
    assert outside_repo(host.tmp, repo) == host.paths
    assert git(repo, "fsck", "--full", "--no-dangling") == ""
    inodes = [line for out in outputs for line in agent_lines(out) if line.startswith("INODE ")]
    assert len(inodes) == 3, inodes
    assert (len(set(inodes)) == 1) is ("fks-base-index" not in tamper), inodes
    assert of_repo("volume", repo) == [kept_name(repo)]
    res = fks("clean", cwd=repo)
    assert res.code == 0 and "removed kept workspace volume" in res.stdout, res.output
    assert of_repo("volume", repo) == [] and read_state(open_repo(repo)) is None


def test_a_kept_workspace_held_by_a_run_is_not_shared(kept_repo: Path) -> None:
    """While a run holds the kept workspace, another works in a volume of its own (removed
    after it), and `fks clean` leaves the held one alone."""
    repo = kept_repo
    res = sandbox("true", "-v")
    assert res.code == 0 and kept_name(repo) in res.output, res.output[-3000:]
    with held(open_repo(repo)) as mine:
        assert mine
        res = sandbox("true", "-v")
        assert res.code == 0, res.output[-3000:]
        assert "fks-ws-kept-" not in res.output
        res = fks("clean", cwd=repo)
        assert "kept workspace" not in res.output
    assert kept_name(repo) in of_repo("volume", repo)


COMMITTING_AGENT = """#!/bin/sh
echo "INODE $(stat -c "%i %.9Z" untouched.txt)"
f="made-$(date +%s%N).txt" && echo "$f" >"$f" && git add "$f" && git commit -qm "$f"
echo "SHARED $(git rev-parse --shared-index-path)"
echo "BASE $(GIT_INDEX_FILE=.git/fks-base-index git rev-parse --shared-index-path)"
echo FORKHESTRA_COMPLETE
"""


def test_the_agents_index_is_split_and_the_base_index_stays_whole(kept_repo: Path) -> None:
    """Once the agent commits, its index is split (a later `git add` or `git commit` writes only
    what changed since); the base index stays whole, so the next run's step trusts it and finds
    the files nobody changed as they were (never rewritten), and both commits land."""
    repo = kept_repo
    add_script(repo, "commit.sh", COMMITTING_AGENT)
    seen: list[str] = []
    for _ in range(2):
        res = sandbox("./scripts/commit.sh:1")
        assert res.code == 0, res.output[-3000:]
        seen += agent_lines(res.stdout)
    shared = [line for line in seen if line.startswith("SHARED ")]
    assert len(shared) == 2 and all(".git/sharedindex." in line for line in shared), seen
    base = [line for line in seen if line.startswith("BASE")]  # whole: no shared index named
    assert len(base) == 2 and all(line.endswith("sharedindex." + "0" * 40) for line in base), seen
    assert all(not line.endswith("0" * 40) for line in shared), seen
    inodes = {line for line in seen if line.startswith("INODE ")}
    assert len(inodes) == 1, seen
    made = git(repo, "ls-tree", "--name-only", "main").split()
    assert len([name for name in made if name.startswith("made-")]) == 2, made


LEAVING_AGENT = """#!/bin/sh
if [ -f note.txt ]; then
    echo "SHARED $(ls .git | grep -c '^sharedindex[.]')"
    echo FORKHESTRA_COMPLETE
    exit 0
fi
echo one >one.txt && git add one.txt && git commit -qm one
for i in 1 2 3 4 5 6 7 8; do echo "$i" >"left$i.txt"; done
echo note >note.txt
"""


def test_work_left_uncommitted_beside_a_split_index_leaves_no_index_behind(
    kept_repo: Path,
) -> None:
    """The export's tree of uncommitted work is written from a copy of the agent's split
    index: it shares the agent's shared index and makes none of its own (each would be the
    whole index's size, once per iteration); the work is still taken."""
    repo = kept_repo
    add_script(repo, "leave.sh", LEAVING_AGENT)
    res = sandbox("./scripts/leave.sh:2")
    assert res.code == 0, res.output[-3000:]
    assert "SHARED 1" in agent_lines(res.stdout), res.stdout[-3000:]
    assert (repo / "one.txt").exists() and (repo / "left8.txt").read_text() == "8\n"


# Killed inside `git commit` (the iteration's timeout), an agent leaves .git/index.lock: its
# index is never written again, so it stays whole.
LOCKED_AGENT = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0)
if [ "$n" -ge 3 ]; then
    echo "SHARED $(ls .git | grep -c '^sharedindex[.]')"
    echo FORKHESTRA_COMPLETE
    exit 0
fi
touch .git/index.lock && echo $((n + 1)) >count && echo "$n" >>untouched.txt
"""


def test_work_left_uncommitted_beside_a_whole_locked_index_leaves_no_index_behind(
    kept_repo: Path,
) -> None:
    """An agent's index that stayed whole (a lock left by a git it killed) is copied whole for
    the export's tree of its uncommitted work: no shared index is written (one the whole
    index's size each iteration that changed a file, kept until the step ends)."""
    repo = kept_repo
    add_script(repo, "locked.sh", LOCKED_AGENT)
    res = sandbox("./scripts/locked.sh:4")
    assert res.code == 0, res.output[-3000:]
    assert "SHARED 0" in agent_lines(res.stdout), res.stdout[-3000:]
    assert (repo / "count").read_text() == "3\n"


# Each iteration regenerates a folder of outputs under new names and commits them, as a build
# or a snapshot tool might.
REGENERATING_AGENT = """#!/bin/sh
n=$(ls out 2>/dev/null | wc -l)
if [ -f out/g3-1 ]; then
    echo "SHARED $(ls .git | grep -c '^sharedindex[.]')"
    echo FORKHESTRA_COMPLETE
    exit 0
fi
it=$(($(ls out 2>/dev/null | head -1 | sed 's/^g\\([0-9]*\\)-.*/\\1/;s/^$/0/') + 1))
git rm -rq --ignore-unmatch out && rm -rf out && mkdir out
for i in 1 2 3 4 5 6 7 8 9 10; do echo "$it" >"out/g$it-$i"; done
git add out && git commit -qm "outputs $it"
"""


def test_commits_of_new_files_every_iteration_leave_one_shared_index(kept_repo: Path) -> None:
    """git writes a new shared index (the whole index's size) for a commit whose new entries
    are a fifth of it, and keeps the old ones two weeks: an agent committing outputs under new
    names every iteration would leave one per iteration in the workspace until its step ends.
    Each iteration's export keeps only the one the agent's index uses."""
    repo = kept_repo
    add_script(repo, "regen.sh", REGENERATING_AGENT)
    res = sandbox("./scripts/regen.sh:4")
    assert res.code == 0, res.output[-3000:]
    assert "SHARED 1" in agent_lines(res.stdout), res.stdout[-3000:]
    assert (repo / "out" / "g3-10").read_text() == "3\n"
