"""More attacks on a workspace kept between runs (`sandbox.keepWorkspace`): an agent of one run
poisons the kept volume through git's own machinery, or another repository at the same path
reaches for it; the next run's step still gets exactly its commit and nothing else."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.attacks import Host, check_agent, outside_repo
from fks_testing.helpers import FKS, fks, git
from fks_testing.sandboxed import add_script, branches, configure, kept_name, of_repo, sandbox

from sandbox_runner.backends.docker.workspace.kept import kept_volume_name

pytestmark = pytest.mark.docker

# What git reads of a repository besides its config and hooks, left in .git and the tree:
# grafts, replace refs and a shallow file that rewrite history, packed refs, an alternate
# pointing at objects of the agent's, linked worktrees and submodule git dirs, attributes with
# a filter (in .git/info and untracked in the tree), a commondir file, a stale index.lock, a
# FIFO named as a tracked file's neighbour, and a symbolic HEAD that is a link.
GIT_POISON = """#!/bin/sh
set -u
evil=$(printf 'evil!\\n' | git hash-object -w --stdin)
tree=$(printf '100644 blob %s\\tREADME.md\\n' "$evil" | git mktree)
fake=$(echo fake | git commit-tree "$tree")
head=$(git rev-parse HEAD)
git replace "$(git rev-parse HEAD^{tree})" "$tree"
git replace "$head" "$fake"
mkdir -p .git/info && echo "$head $fake" > .git/info/grafts && echo "$head" > .git/shallow
printf '%s refs/heads/main\\n%s refs/tags/v1\\n' "$fake" "$fake" > .git/packed-refs
mkdir -p /workspace/dir1/objs && cp -r .git/objects/* /workspace/dir1/objs/ 2>/dev/null
echo /workspace/dir1/objs >> .git/objects/info/alternates
mkdir -p .git/worktrees/w .git/modules/m && echo /workspace > .git/worktrees/w/gitdir
echo '* filter=evil' > .git/info/attributes && echo '*.txt filter=evil' > dir2/.gitattributes
git config filter.evil.smudge 'echo smudged > /workspace/SMUDGED.log; cat'
git config filter.evil.clean 'echo cleaned > /workspace/CLEANED.log; cat'
git config filter.evil.required true
git config lfs.fetchexclude x && git config core.attributesFile /workspace/dir2/.gitattributes
echo "POISONED $(git replace -l | wc -l) $(git config filter.evil.required)"
git config extensions.worktreeConfig true && git config core.repositoryformatversion 1
echo .. > .git/commondir && touch .git/index.lock && mkfifo dir1/pipe
echo FORKHESTRA_COMPLETE
"""

# The files of a fresh git dir of fks's making, and nothing else (but the shared index that
# this agent's own `git status` split its index into).
EXACT_GIT_DIR = """
own=$(basename "$(git rev-parse --shared-index-path)")
[ "$(ls -A .git | grep -vx "$own" | tr '\\n' ' ')" = "HEAD config fks-base-index fks-export index objects refs " ] ||
  bad "git dir: $(ls -A .git | tr '\\n' ' ')"
[ ! -e SMUDGED.log ] && [ ! -e CLEANED.log ] || bad filter
[ "$(git rev-parse HEAD^{tree})" = "$(git cat-file -p HEAD | sed -n 's/^tree //p')" ] || bad replaced
"""


@pytest.fixture
def kept_repo(repo: Path) -> Iterator[Path]:
    for name, content in {"dir1/f": "one\n", "dir2/f.txt": "two\n"}.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files to poison")
    configure(repo, {"sandbox": {"keepWorkspace": True, "network": "none"}})
    yield repo
    for name in of_repo("volume", repo):
        subprocess.run(["docker", "volume", "rm", "-f", name], check=False)


def test_git_machinery_left_in_the_kept_workspace_is_not_obeyed(
    kept_repo: Path, host: Host
) -> None:
    """Grafts, replace refs, shallow, packed refs, alternates, worktrees, modules, filters and
    a FIFO left by one run: the next run's step finds exactly its commit in a git dir of
    fks's making, no filter ran, and no ref of the user's moved."""
    repo = kept_repo
    add_script(repo, "poison.sh", GIT_POISON)
    check = check_agent("README.md dir1/f dir2/f.txt", r"hello\none\ntwo")
    add_script(
        repo, "check.sh", check.replace("echo CHECK-DONE", EXACT_GIT_DIR + "echo CHECK-DONE")
    )
    host.agent("true")
    main, tags = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "v1")
    res = sandbox("./scripts/poison.sh:1")
    assert res.code == 0 and "POISONED 2 true" in res.stdout, res.output[-3000:]
    res = sandbox("./scripts/check.sh:1")
    assert res.code == 0, res.output[-3000:]
    assert "CHECK-DONE" in res.stdout and "CHECK-FAIL" not in res.stdout, res.stdout[-3000:]
    assert f"HEAD {main}" in res.stdout
    assert git(repo, "rev-parse", "main") == main and git(repo, "rev-parse", "v1") == tags
    assert git(repo, "replace", "-l") == "" and not (repo / ".git" / "info" / "grafts").exists()
    assert list(host.markers.iterdir()) == []
    assert outside_repo(host.tmp, repo) == host.paths


# Writes a file of its own, waits while another run may start, then says whether it is still
# there as it left it.
HOLDER = """#!/bin/sh
echo mine > mine.txt
i=0
while [ ! -e /workspace/ANOTHER ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
sleep 1
if [ "$(cat mine.txt 2>/dev/null)" = mine ]; then echo HOLDER-INTACT; else echo HOLDER-LOST; fi
echo FORKHESTRA_COMPLETE
"""
INTRUDER = "#!/bin/sh\ntouch ANOTHER\necho FORKHESTRA_COMPLETE\n"


def test_another_repository_at_the_same_path_does_not_share_the_kept_workspace(
    kept_repo: Path, tmp_path: Path
) -> None:
    """A repository at the same path in another mount namespace (CI jobs in containers that
    share the engine) runs while a run of this one holds the kept workspace: it must not
    work in that volume, and the holder's workspace stays as its agent left it."""
    repo = kept_repo
    add_script(repo, "holder.sh", HOLDER)
    add_script(repo, "intruder.sh", INTRUDER)
    other = tmp_path / "other"
    subprocess.run(["cp", "-a", str(repo), str(other)], check=True)
    (other / ".git" / "fks").mkdir(exist_ok=True)
    for path in (other / ".git" / "fks").glob("kept-workspace*"):
        path.unlink()  # a repository of its own: no state nor lock of this one's
    holder = subprocess.Popen(
        [FKS, "run", "./scripts/holder.sh:1", "--sandbox"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (kept := kept_volume_name(repo)) is None or kept not in of_repo("volume", repo):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.2)
        time.sleep(2)  # the holder's agent has started
        intruder = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount --bind "$1" "$2" && cd "$2" && exec "$3" run ./scripts/intruder.sh:1 '
             "--sandbox -v", "sh", str(other), str(repo), FKS],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        out, _ = holder.communicate(timeout=120)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert git(repo, "ls-tree", "--name-only", "main", "ANOTHER") == "", out[-3000:]  # not its
    assert "HOLDER-INTACT" in out, out[-3000:]
    assert str(kept_volume_name(repo)) not in intruder.stdout + intruder.stderr


# Poisons the workspace (git config that would run on whoever obeys it, a hook, an ignored
# file), then works on until fks is killed under it.
KILLED = """#!/bin/sh
echo lost > debug.log && echo work > work.txt
git config core.fsmonitor 'PAYLOAD' && git config core.hooksPath /workspace/.githooks
mkdir -p .githooks && printf '#!/bin/sh\\nPAYLOAD\\n' > .githooks/post-checkout
chmod +x .githooks/post-checkout
echo POISONED-KILLED
sleep 3
echo FORKHESTRA_COMPLETE
"""


def test_a_killed_run_keeps_its_poisoned_kept_workspace_to_itself(
    kept_repo: Path, host: Host
) -> None:
    """fks is killed while its agent poisons the kept workspace: the next run works in a
    volume of its own, `fks clean` saves the killed step's work onto its branch only and
    removes the volume, and a run after that starts from a new one. Nothing ran on the host."""
    repo = kept_repo
    add_script(repo, "killed.sh", KILLED.replace("PAYLOAD", host.payload("killed")))
    add_script(repo, "check.sh", check_agent("README.md dir1/f", r"hello\none"))
    host.agent("true")
    main = git(repo, "rev-parse", "main")
    proc = subprocess.Popen([FKS, "run", "./scripts/killed.sh:1", "--sandbox"], cwd=repo)
    try:
        deadline = time.monotonic() + 60
        runs = repo / ".forge" / "runs"
        while not any("POISONED-KILLED" in p.read_text() for p in runs.glob("*/01-*/001.log")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 60
    kept = kept_name(repo)
    while subprocess.run(
        ["docker", "ps", "-q", "--filter", f"volume={kept}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip():  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.2)
    res = sandbox("./scripts/check.sh:1", "-v")
    assert res.code == 0 and "CHECK-DONE" in res.stdout, res.output[-3000:]
    assert "CHECK-FAIL" not in res.stdout and kept not in res.output
    res = fks("clean", cwd=repo)
    assert res.code == 0 and "removed kept workspace volume" in res.stdout, res.output
    assert kept not in of_repo("volume", repo)
    killed = [b for b in branches(repo) if b.endswith("1-killed.sh")]
    assert len(killed) == 1 and git(repo, "show", f"{killed[0]}:work.txt") == "work"
    assert git(repo, "rev-parse", "main") == main and not (repo / "debug.log").exists()
    res = sandbox("./scripts/check.sh:1", "-v")
    assert res.code == 0 and "CHECK-DONE" in res.stdout, res.output[-3000:]
    assert "CHECK-FAIL" not in res.stdout and kept_name(repo) in res.output
    assert list(host.markers.iterdir()) == []
    assert outside_repo(host.tmp, repo) == host.paths
