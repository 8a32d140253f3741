"""An adversarial agent against `fks run --sandbox`: each test is one attack from inside the
container, run with the real CLI and Docker, and checks what the trust boundary promises.

Every attack's payload would `touch` a marker under the test's tmp_path, a host path the
container cannot see: it can only appear if the *host* ran something the agent wrote. Each test
then checks that nothing else on the host changed (paths outside the repository, the user's
refs, `git fsck --full`) and that a failure reads as one clear line, with no traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fks_testing.attacks import (
    DIRTY_AGENT,
    EX,
    KILL_WRAPPER,
    MARK,
    OWN_INFO,
    Host,
    check_agent,
    one_line,
    refs,
    step_tip,
)
from fks_testing.helpers import Result, agent_lines, git
from fks_testing.sandboxed import (
    RUNTIMES,
    add_script,
    configure,
    of_repo,
    record,
    runtime_args,
    sandbox,
)

pytestmark = pytest.mark.docker

COMMIT_WORK = "echo work > work.txt && git add work.txt && git commit -qm 'agent work'"


# --- 1. git metadata in the workspace ------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_workspace_hooks_fsmonitor_and_drivers_never_run_on_host(
    repo: Path, host: Host, runtime: str
) -> None:
    """Hooks, hooksPath, fsmonitor and filter/diff/merge drivers set in the workspace's .git,
    and a committed .gitattributes naming them: they may run in the container, never on the host."""
    hooks = "post-commit post-merge post-checkout reference-transaction post-rewrite pre-auto-gc"
    body = f"""
for dir in .git/hooks /tmp/hooks; do
  mkdir -p $dir
  for h in {hooks}; do printf '#!/bin/sh\\n{host.payload("hook-$h")}\\n' > $dir/$h; chmod +x $dir/$h; done
done
git config core.hooksPath /tmp/hooks
git config core.fsmonitor '{host.payload("fsmonitor")}'
git config filter.pwn.clean '{host.payload("clean")}; cat'
git config filter.pwn.smudge '{host.payload("smudge")}; cat'
git config diff.pwn.command '{host.payload("diff")}'
git config diff.pwn.textconv '{host.payload("textconv")}; cat'
git config merge.pwn.driver '{host.payload("merge")}'
git config include.path /workspace/evil.cfg
printf '* filter=pwn diff=pwn merge=pwn\\n' > .gitattributes
printf 'line 1\\nline 2\\nline 3\\nagent line\\n' > README.md
{COMMIT_WORK.replace("work.txt", "work.txt .gitattributes README.md")}
{MARK}
"""
    res = sandbox(host.agent(body) + ":1", *runtime_args(runtime))
    # A changed .gitattributes never lands by itself: the step is incomplete, its branch kept.
    assert res.code == 1, res.output[-3000:]
    assert "it changes .gitattributes, which changes what git writes on checkout" in res.output
    host.check(res, merged=False)
    assert not (repo / ".gitattributes").exists()
    # Merged by hand, the user's own git with the agent's attributes runs no driver.
    git(repo, "merge", "-q", "--ff-only", record(repo)["steps"][0]["branch"])
    assert (repo / ".gitattributes").read_text() == "* filter=pwn diff=pwn merge=pwn\n"
    git(repo, "diff", "HEAD~1", "HEAD")
    assert list(host.markers.iterdir()) == []


@pytest.mark.parametrize(
    "redirect",
    [
        pytest.param("mv .git .git-real && printf 'gitdir: {git}\\n' > .git", id="gitfile"),
        pytest.param("echo {git} > .git/commondir", id="commondir"),
        pytest.param("rm -rf .git && ln -s {git} .git", id="git-symlink"),
        pytest.param("mv .git .real && ln -s /proc/self/cwd/.real .git", id="git-symlink-proc"),
    ],
)
def test_workspace_git_dir_redirected_to_host_path(repo: Path, host: Host, redirect: str) -> None:
    """The agent points its workspace's git dir at the user's real .git path (and sets an
    fsmonitor payload first): the host never looks, the iteration fails clearly."""
    body = f"""
git config core.fsmonitor '{host.payload("fsmonitor")}'
{COMMIT_WORK}
{redirect.format(git=repo / ".git")}
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    host.check(res, merged=res.code == 0)
    if res.code != 0:
        one_line(res, "'main' was not touched")


@pytest.mark.parametrize("name", [".GIT", "git~1", ".git", ".gitmodules"])
def test_committed_git_lookalike_path_is_refused(repo: Path, host: Host, name: str) -> None:
    """A tree holding `.GIT/config` (or its NTFS/HFS aliases, or a symlinked .gitmodules) would
    configure the user's git on checkout: git's fsck refuses it on the way in."""
    if name == ".gitmodules":
        entry = '$(printf "120000 blob %s\\t.gitmodules\\n" $(printf /etc/passwd | git hash-object -w --stdin))'
    else:
        entry = (
            '$(printf "040000 tree %s\\t' + name + '\\n" '
            '$(printf "100644 blob %s\\tconfig\\n" "$cfg" | git mktree))'
        )
    body = f"""
cfg=$(printf '[core]\\n\\tfsmonitor = {host.payload("dotgit")}\\n' | git hash-object -w --stdin)
tree=$({{ git ls-tree HEAD; echo "{entry}"; }} | git mktree) || exit 3
commit=$(git commit-tree $tree -p HEAD -m 'agent adds {name}') || exit 4
git reset -q --hard $commit 2>/dev/null || git update-ref HEAD $commit
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert step_tip(repo) == host.refs["refs/heads/main"]
    one_line(res, "the agent's commits were refused")


# A default ACL that gives nobody anything, on the folders a new step's git dir needs: files and
# folders made in them later would be unusable, were the folders kept.
DENY_ALL_BY_DEFAULT = (
    'python3 -c "\n'
    "import os, struct\n"
    "acl = struct.pack('<I', 2) + b''.join(struct.pack('<HHI', t, 0, 0xFFFFFFFF) for t in (1, 4, 32))\n"
    "for d in ('.git/refs', '.git/objects', '.git/objects/info'):\n"
    "    os.setxattr(d, 'system.posix_acl_default', acl)\n"
    '"'
)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param("", id="base-index-kept"),
        pytest.param("", id="base-index-kept-4000-files"),
        pytest.param("touch -d '+1 hour' .git/fks-base-index", id="base-index-retimed"),
        pytest.param("cp .git/index .git/fks-base-index", id="base-index-replaced"),
        pytest.param(
            "rm -rf .git/fks-base-index && mkdir .git/fks-base-index", id="base-index-dir"
        ),
        pytest.param(DENY_ALL_BY_DEFAULT, id="git-folders-deny-all-acl"),
    ],
)
def test_next_step_gets_exactly_its_commit_whatever_the_last_left(
    repo: Path, tamper: str, request: pytest.FixtureRequest
) -> None:
    """Two steps dirty the recycled workspace in ways their snapshots miss, the second on a
    workspace switched by the fast path; the third step still finds exactly its commit, a git
    dir of fks's making, and (unless the base index was touched) the files no step changed
    never rewritten. With 4000 files, the first step waits out its checkout's second instead
    of leaving the second to re-read them."""
    if request.node.callspec.id.endswith("4000-files"):
        (repo / "many").mkdir()
        for n in range(4000):
            (repo / "many" / f"f{n:04d}.txt").write_text(f"{n}\n")
    for name, content in {
        "untouched.txt": "same\n",
        "racy.txt": "racy\n",
        "dir1/f": "one\n",
        "dir2/f": "two\n",
        ".gitignore": "*.log\ncache/\n",
    }.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files to dirty")
    add_script(repo, "dirty.sh", DIRTY_AGENT.replace("TAMPER", tamper))
    add_script(
        repo, "check.sh", check_agent("README.md racy.txt dir1/f dir2/f", r"hello\nracy\none\ntwo")
    )
    main = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/dirty.sh:1 -> ./scripts/dirty.sh:1 -> ./scripts/check.sh:1")
    assert res.code == 0, res.output[-3000:]
    assert "CHECK-DONE" in res.stdout and "CHECK-FAIL" not in res.stdout, res.stdout[-3000:]
    assert not (repo / "HOOKED.log").exists()
    assert git(repo, "rev-parse", "main") == main  # nothing the snapshots saw, nothing merged
    assert f"HEAD {main}" in res.stdout
    inodes = [line for line in agent_lines(res.stdout) if line.startswith("INODE ")]
    assert len(inodes) == 3, res.stdout[-3000:]
    # a full checkout (the base index touched) rewrites all
    assert (len(set(inodes)) == 1) is ("fks-base-index" not in tamper), inodes


# What a step leaves only inside tracked folders (the top untouched), hidden from its snapshot
# (ignored, excluded, or behind assume-unchanged): the next step cleans only the folders whose
# entries changed, so each way of changing one must be seen.
FOLDERS_AGENT = """#!/bin/sh
set -u
echo "INODE $(stat -c "%i %.9Z" untouched.txt)"
mkdir -p .git/info && echo '*.tmp' >> .git/info/exclude
LEAVE
echo FORKHESTRA_COMPLETE
"""


@pytest.mark.parametrize(
    "leave",
    [
        pytest.param(
            'mtime=$(stat -c %Y a/b/c) && echo u > a/b/c/u.tmp && touch -d "@$mtime" a/b/c',
            id="deep-mtime-put-back",
        ),
        pytest.param(
            "git update-index --assume-unchanged s/d/f && mv s/d s/e.tmp && mkdir s/d && "
            "echo u > s/d/f2.tmp",
            id="folders-swapped",
        ),
        pytest.param(
            "echo junk > s/x.log && mkdir -p s/n.tmp/locked && touch s/n.tmp/locked/x && "
            "chmod 000 s/n.tmp/locked && chmod a-w s",
            id="read-only-folder",
        ),
        pytest.param(
            "git update-index --assume-unchanged s/d/f && echo u > s/d/u.tmp && echo u > s/u.tmp "
            "&& chmod 000 s/d",
            id="tracked-folder-unreadable",
        ),
        pytest.param(
            "mkdir -p a/.git && echo evil > a/.git/evil && echo 'gitdir: /nowhere' > a/b/c/.git "
            "&& ln -s /etc/passwd s/.git && git init -q s/d && "
            "git -C s/d config core.fsmonitor 'echo hooked > /workspace/HOOKED.log; false'",
            id="git-dirs-below-the-top",
        ),
        pytest.param(
            "mkfifo a/b/c/pipe && python3 -c "
            "'import socket; socket.socket(socket.AF_UNIX).bind(\"s/sock\")'",
            id="fifo-and-socket",
        ),
        pytest.param("mkfifo top.tmp", id="fifo-at-the-top"),
        pytest.param(
            "git update-index --assume-unchanged a/b/c/f && touch a/b/c/f && "
            "mkfifo a/.gitattributes",
            id="fifo-where-git-reads-attributes",
        ),
        pytest.param(
            'python3 -c "import os\n'
            "os.chdir('a/b/c'); os.mkdir('deep.tmp'); os.chdir('deep.tmp')\n"
            "for _ in range(25): os.mkdir('d' * 200); os.chdir('d' * 200)\n"
            "open('f', 'w').write('x')\n"
            "os.chmod('.', 0)\"",
            id="path-longer-than-git-takes",
        ),
        pytest.param('echo u > "odd dir/u.tmp"', id="odd-folder-name"),
        pytest.param("for n in $(seq 10 80); do echo u > m$n/u.tmp; done", id="71-folders"),
    ],
)
def test_next_step_finds_nothing_left_in_the_folders_the_last_changed(
    repo: Path, leave: str
) -> None:
    """Untracked and ignored files left deep in tracked folders (the folder's mtime put back),
    in swapped folders, in a read-only folder, in a folder made unreadable, in a folder whose
    name has a space, in 71 folders: the next steps still find exactly their commit, with
    the unchanged files never rewritten."""
    files = {"untouched.txt": "same\n", ".gitignore": "*.log\n", "a/b/c/f": "c\n"}
    files |= {"s/f": "s\n", "s/d/f": "d\n", "odd dir/f": "odd\n"}
    files |= {f"m{n}/f": f"{n}\n" for n in range(10, 81)}
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "folders to dirty")
    add_script(repo, "dirty.sh", FOLDERS_AGENT.replace("LEAVE", leave))
    configure(repo, {"sandbox": {"timeout": 60}})  # a preparation that blocks fails, not hangs
    add_script(repo, "check.sh", check_agent("a/b/c/f s/f s/d/f", r"c\ns\nd"))
    main = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/dirty.sh:1 -> ./scripts/dirty.sh:1 -> ./scripts/check.sh:1")
    assert res.code == 0, res.output[-3000:]
    assert "CHECK-DONE" in res.stdout and "CHECK-FAIL" not in res.stdout, res.stdout[-3000:]
    assert git(repo, "rev-parse", "main") == main  # nothing the snapshots saw, nothing merged
    assert not (repo / "HOOKED.log").exists()
    inodes = [line for line in agent_lines(res.stdout) if line.startswith("INODE ")]
    assert len(inodes) == 3 and len(set(inodes)) == 1, res.stdout[-3000:]


# --- 2. symlinks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_symlinks_in_workspace_git_dir_stay_in_the_container(
    repo: Path, host: Host, runtime: str
) -> None:
    """Symlinked object directories, alternates and refs pointing at host-looking paths: git in
    the container resolves them there; the host only ever sees the bundle."""
    body = f"""
{COMMIT_WORK}
ln -s /etc .git/objects/ee
ln -s {repo}/.git/objects .git/objects/pack/host-objects
echo {repo}/.git/objects >> .git/objects/info/alternates
ln -s /etc/passwd .git/refs/heads/evil
ln -s {repo}/.git/refs/heads/main .git/refs/tags/v1
ln -s {host.secret} .git/refs/heads/secret
{MARK}
"""
    res = sandbox(host.agent(body) + ":1", *runtime_args(runtime))
    assert res.code == 0, res.output[-3000:]
    host.check(res, merged=True)
    assert git(repo, "log", "-1", "--format=%s", "main") == "agent work"


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(f"rm -rf {EX} && ln -s /etc {EX}", id="export-dir-symlink"),
        pytest.param(f"ln -s /etc/passwd {EX}/bundle", id="bundle-etc-passwd"),
        pytest.param(f"ln -s /dev/zero {EX}/bundle", id="bundle-dev-zero"),
        pytest.param(f"ln -s /proc/self/environ {EX}/bundle", id="bundle-proc-environ"),
        pytest.param(f"mkfifo {EX}/bundle", id="bundle-fifo"),
        pytest.param(f"mkdir {EX}/bundle", id="bundle-dir"),
        pytest.param(f"rm {EX}/info && ln -s /etc/shadow {EX}/info", id="info-symlink"),
        pytest.param(f"ln {EX}/info {EX}/bundle", id="bundle-hardlink"),
        pytest.param(f"echo x > {EX}/extra", id="extra-file"),
    ],
)
def test_export_that_is_not_a_regular_file_is_refused(repo: Path, host: Host, attack: str) -> None:
    """The agent kills the wrapper after replacing the export with a link, FIFO or directory:
    nothing on the host is opened or followed; the iteration fails clearly, base untouched."""
    body = f"{COMMIT_WORK}\n{OWN_INFO}\n{attack}\n{MARK}\n{KILL_WRAPPER}"
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    line = one_line(res, "refused")
    assert "'main' was not touched" in line
    assert step_tip(repo) == host.refs["refs/heads/main"]


def test_a_later_iteration_never_passes_off_the_last_ones_export(repo: Path, host: Host) -> None:
    """The agent of a step's second iteration commits, then kills the script before it can
    export: the host must not take the first iteration's export, still in the workspace, for
    this one's, but save this iteration's commit from the workspace."""
    body = f"""
if [ ! -e one.txt ]; then echo one > one.txt && git add one.txt && git commit -qm 'agent one'
else echo two > two.txt && git add two.txt && git commit -qm 'agent two'; {MARK}; {KILL_WRAPPER}; fi
"""
    res = sandbox(host.agent(body) + ":2")
    host.check(res, merged=res.code == 0)
    assert git(repo, "log", "-1", "--format=%s", step_tip(repo)) == "agent two", res.output[-3000:]


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(f"ln -s /etc {EX}/extra", id="extra-symlink"),
        pytest.param(f"touch {EX}/.hidden", id="hidden-file"),
        pytest.param(f"rm -rf {EX} && ln -s /etc {EX}", id="export-dir-symlink"),
        pytest.param(f"ln -s /etc/passwd {EX}/bundle", id="bundle-symlink"),
        pytest.param(f"mkdir -p {EX}/bundle/x", id="bundle-dir"),
        pytest.param(f"ln one.txt {EX}/info", id="info-hardlink-to-tracked-file"),
        pytest.param(f"ln -sf ../../one.txt {EX}/info", id="info-symlink-to-tracked-file"),
    ],
)
def test_what_the_agent_leaves_in_the_export_dir_is_cleared(
    repo: Path, host: Host, attack: str
) -> None:
    """The export directory is the agent's to write while it runs: whatever it leaves there,
    each iteration's export starts from an empty one, without following or writing through
    anything the agent placed (its own files stay as it committed them)."""
    body = f"""
if [ -e one.txt ]; then {MARK}
else echo one > one.txt && git add one.txt && git commit -qm 'agent one'; fi
{attack}
"""
    res = sandbox(host.agent(body) + ":3")
    assert res.code == 0, res.output[-3000:]
    host.check(res, merged=True)
    assert "refused" not in res.output
    assert len(record(repo)["steps"][0]["iterations"]) == 2
    assert git(repo, "show", "main:one.txt") == "one"
    assert (repo / "one.txt").read_text() == "one\n"


def test_committed_symlink_outside_repo_is_just_a_symlink(repo: Path, host: Host) -> None:
    """Committed symlinks to host paths land as symlinks; fks never follows them."""
    body = f"""
ln -s {host.secret} secret-link && ln -s /etc/passwd passwd-link && ln -s ../outside escape
git add secret-link passwd-link escape && git commit -qm 'agent links'
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 0, res.output[-3000:]
    host.check(res, merged=True)
    assert (repo / "secret-link").readlink() == host.secret
    assert (repo / "escape").readlink() == Path("../outside")
    assert "TOPSECRET" not in git(repo, "log", "-p", "--all")


# --- 3. a poisoned object -------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_poisoned_object_never_reaches_the_user(repo: Path, host: Host, runtime: str) -> None:
    """Garbage stored under the id of content the user has not written yet (and a commit that
    points at it): refused on the way in; the user's later commit of that content is sound."""
    content = "the user's next file\n"
    oid = subprocess.run(
        ["git", "hash-object", "--stdin"], input=content, capture_output=True, text=True, check=True
    ).stdout.strip()
    body = f"""
mkdir -p .git/objects/{oid[:2]}
python3 -c 'import sys, zlib; sys.stdout.buffer.write(zlib.compress(b"blob 6\\0junk!\\n"))' > .git/objects/{oid[:2]}/{oid[2:]}
git update-index --add --cacheinfo 100644,{oid},poison.txt && git commit -qm 'agent poison'
{MARK}
"""
    res = sandbox(host.agent(body) + ":1", *runtime_args(runtime))
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    one_line(res, "'main' was not touched")
    assert subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, check=False).returncode != 0
    (repo / "next.txt").write_text(content)
    git(repo, "add", "next.txt")
    git(repo, "commit", "-qm", "user's next file")
    assert git(repo, "show", "HEAD:next.txt") + "\n" == content
    assert git(repo, "rev-parse", "HEAD:next.txt") == oid
    host.refs = refs(repo)
    host.check(res)


# --- 4. a bundle that names other refs -----------------------------------------------------------


@pytest.mark.parametrize("with_branch", [True, False], ids=["with-step-branch", "others-only"])
def test_own_bundle_with_other_refs_moves_only_the_step_branch(
    repo: Path, host: Host, with_branch: bool
) -> None:
    """The agent's own bundle carries main, a tag, remotes and other fks refs at its commit:
    only the step branch may move; main, tags and everything else stay as they were."""
    step = '"refs/heads/$FKS_BRANCH"' if with_branch else ""
    body = f"""
{COMMIT_WORK}
git tag -f v1 HEAD && git update-ref refs/heads/main HEAD && git update-ref refs/remotes/origin/main HEAD
git update-ref refs/fks/other/leftover/1 HEAD && git update-ref refs/heads/fks/evil HEAD
{OWN_INFO}
git bundle create -q {EX}/bundle refs/heads/main refs/tags/v1 refs/remotes/origin/main refs/fks/other/leftover/1 refs/heads/fks/evil {step} || exit 3
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    moved_to = step_tip(repo)
    if with_branch:
        assert git(repo, "log", "-1", "--format=%s", moved_to) == "agent work"
    else:
        assert moved_to == host.refs["refs/heads/main"]


def test_a_bundle_printed_in_the_output_moves_only_the_step_branch(repo: Path, host: Host) -> None:
    """The same bundle printed the way the script prints a small one (its lines and a report
    with the iteration's nonce, which the agent can read), the script killed before its own:
    taken from the output (the workspace no longer holds its commit), it still moves only the
    step branch."""
    body = f"""
{COMMIT_WORK}
git tag -f v1 HEAD && git update-ref refs/heads/main HEAD
git bundle create -q /tmp/b refs/heads/main refs/tags/v1 "refs/heads/$FKS_BRANCH" || exit 3
git reset -q --hard HEAD~1  # the workspace no longer holds it: only the output does
base64 -w 65536 /tmp/b | sed "s/^/fks-bundle $FKS_NONCE /" >&2
printf 'fks-bundle-end %s %s\\n' "$FKS_NONCE" "$(sha256sum </tmp/b | cut -d' ' -f1)" >&2
printf 'fks-export %s before=a\\tafter=b\\tend=1\\tbundle=1\\n' "$FKS_NONCE" >&2
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert git(repo, "log", "-1", "--format=%s", step_tip(repo)) == "agent work"
    assert "fks-bundle" not in res.output  # the channel's lines are not shown as output


@pytest.mark.parametrize("kind", ["blob", "tree", "tag"])
def test_step_branch_at_a_non_commit_is_refused(repo: Path, host: Host, kind: str) -> None:
    """A hand-made bundle whose step branch names a blob, tree or tag object."""
    make = {
        "blob": "echo data | git hash-object -w --stdin",
        "tree": "git rev-parse HEAD^{tree}",
        "tag": "git tag -a -m t sneaky HEAD >/dev/null && git rev-parse sneaky",
    }[kind]
    body = f"""
{COMMIT_WORK}
target=$({make})
{OWN_INFO}
{{ printf "# v2 git bundle\\n%s refs/heads/%s\\n\\n" $target "$FKS_BRANCH"
  git rev-list --objects $target --not $FKS_SINCE | git pack-objects -q --stdout; }} > {EX}/bundle
{MARK}
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert "not a commit" in one_line(res, "refused")
    assert step_tip(repo) == host.refs["refs/heads/main"]


# --- 5. huge and malformed bundles -------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_bundle_over_the_size_limit_is_refused(repo: Path, host: Host, runtime: str) -> None:
    body = f"""
head -c 1000000 /dev/urandom > big.bin && git add big.bin && git commit -qm 'agent big'
{MARK}
"""
    res = sandbox(
        host.agent(body) + ":1", *runtime_args(runtime), env={"FKS_MAX_BUNDLE_BYTES": "100000"}
    )
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert "FKS_MAX_BUNDLE_BYTES" in one_line(res, "larger than")
    assert step_tip(repo) == host.refs["refs/heads/main"]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(f"head -c 4096 /dev/urandom > {EX}/bundle", id="garbage"),
        pytest.param(
            'git bundle create -q /tmp/b "refs/heads/$FKS_BRANCH" ^$FKS_SINCE && '
            f"head -c $(( $(wc -c < /tmp/b) - 40 )) /tmp/b > {EX}/bundle",
            id="truncated",
        ),
        pytest.param(
            f'printf "# v2 git bundle\\n%s refs/heads/%s\\n\\n" $(git rev-parse HEAD) "$FKS_BRANCH" > {EX}/bundle',
            id="header-only",
        ),
        pytest.param(
            f'printf "# v2 git bundle\\n%s refs/heads/%s\\n" $(git rev-parse HEAD) "$FKS_BRANCH" > {EX}/bundle; '
            f"head -c 3000000 /dev/zero | tr '\\0' x >> {EX}/bundle",
            id="endless-header",
        ),
        pytest.param(
            f'{{ printf "# v3 git bundle\\n@object-format=sha256\\n%s refs/heads/%s\\n\\n" '
            f'$(git rev-parse HEAD) "$FKS_BRANCH"; git rev-parse HEAD | git pack-objects -q --stdout; }} > {EX}/bundle',
            id="sha256",
        ),
        pytest.param(
            f'{{ printf "# v3 git bundle\\n@filter=blob:none\\n%s refs/heads/%s\\n\\n" '
            f'$(git rev-parse HEAD) "$FKS_BRANCH"; git rev-list --objects --filter=blob:none HEAD ^$FKS_SINCE | '
            f"git pack-objects -q --stdout; }} > {EX}/bundle",
            id="filtered-no-blobs",
        ),
    ],
)
def test_malformed_bundle_is_refused(repo: Path, host: Host, make: str) -> None:
    body = f"""
{COMMIT_WORK}
{OWN_INFO}
{make}
{MARK}
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    one_line(res, "'main' was not touched")
    assert step_tip(repo) == host.refs["refs/heads/main"]


# --- 6. the rest -----------------------------------------------------------------------------------


def test_info_lines_are_bounded_and_made_printable(repo: Path, host: Host) -> None:
    """Terminal escapes, control characters and a 10 MB line in `info` come out as plain text."""
    body = f"""
{COMMIT_WORK}
{OWN_INFO}
printf 'warning=\\033]0;pwned\\007\\033[31mred\\rover\\n' >> {EX}/info
{{ printf 'warning='; head -c 10000000 /dev/zero | tr '\\0' A; echo; }} >> {EX}/info
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    line = one_line(res, "red")
    assert "\x1b" not in res.output and "\x07" not in res.output and "\r" not in res.output
    assert "?]0;pwned??[31mred" in line
    assert max(len(x) for x in res.output.splitlines()) < 1000


def test_killed_wrapper_work_is_still_exported(repo: Path, host: Host) -> None:
    """Killing the wrapper before it exports only loses it the export: a fresh container exports
    the workspace instead."""
    body = f"{COMMIT_WORK}\n{MARK}\n{KILL_WRAPPER}"
    res = sandbox(host.agent(body) + ":1")
    host.check(res, merged=res.code == 0)
    assert git(repo, "log", "-1", "--format=%s", step_tip(repo)) == "agent work"


def test_deleted_branch_and_detached_head(repo: Path, host: Host) -> None:
    body = f"""
git checkout -q --detach
{COMMIT_WORK}
git branch -D "$FKS_BRANCH" >/dev/null
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 0, res.output[-3000:]
    host.check(res, merged=True)
    one_line(res, "deleted its branch")
    one_line(res, "left HEAD off its branch")
    assert git(repo, "log", "-1", "--format=%s", "main") == "agent work"


def test_rewritten_unrelated_history_is_not_merged(repo: Path, host: Host) -> None:
    """The agent replaces its branch with an unrelated (orphan) history: kept for review, never
    merged, one clear line."""
    body = f"""
git checkout -q --orphan other && git rm -rqf . && echo new > only.txt && git add only.txt
git commit -qm 'agent orphan' && git branch -qf "$FKS_BRANCH" other && git checkout -q "$FKS_BRANCH"
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert git(repo, "log", "-1", "--format=%s", step_tip(repo)) == "agent orphan"
    one_line(res, "history")


def test_unreadable_git_dir(repo: Path, host: Host) -> None:
    body = f"{COMMIT_WORK}\nchmod 000 .git\n{MARK}"
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    one_line(res, "'main' was not touched")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_filling_tmpfs_is_bounded_by_the_memory_limit(repo: Path, host: Host, runtime: str) -> None:
    from fks_testing.sandboxed import configure

    configure(repo, {"sandbox": {"memory": "64m"}})
    body = f"{COMMIT_WORK}\nhead -c 200000000 /dev/zero > /tmp/fill\necho wrote $?\n{MARK}"
    res = sandbox(host.agent(body) + ":1", *runtime_args(runtime))
    host.check(res, merged=res.code == 0)
    assert "wrote 0" not in res.output


# --- fks's own state in the user's checkout --------------------------------------------------------


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param("ln -s {outside} .forge && git add .forge", id="forge-symlink"),
        pytest.param(
            "mkdir -p .forge/runs/planted && echo '{{}}' > .forge/runs/planted/run.json && git add -f .forge",
            id="planted-record",
        ),
        pytest.param(
            'mkdir -p ".forge/runs/${{FKS_BRANCH#fks/}}" && '
            'ln -s {outside} ".forge/runs/${{FKS_BRANCH#fks/}}/01-x" && git add -f .forge',
            id="run-dir-symlink",
        ),
    ],
)
def test_commits_touching_fks_run_records_are_not_merged(
    repo: Path, host: Host, plant: str
) -> None:
    """`.forge/` holds fks's run records and is only ignored, not tracked: a fast-forward would
    replace it (git treats ignored files as expendable) with the agent's symlink or records, and
    fks would then write through it to a host path. Such a step is kept for review instead."""
    body = f"""
{plant.format(outside=host.outside)}
git commit -qm 'agent plants .forge'
{MARK}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert list(host.outside.iterdir()) == []
    assert (repo / ".forge" / "runs" / record(repo)["id"] / "run.json").is_file()
    one_line(res, ".forge")


def test_prompt_file_replaced_by_symlink_is_not_followed(repo: Path, host: Host) -> None:
    """Step 1 merges a commit that turns the prompt file into a symlink to a host secret;
    step 2's prompt must not be the secret (the host reads no path the agent could write)."""
    (repo / "PROMPT.md").write_text("do the work\n")
    git(repo, "add", "PROMPT.md")
    git(repo, "commit", "-qm", "prompt")
    first = host.agent(
        f"rm PROMPT.md && ln -s {host.secret} PROMPT.md && git add PROMPT.md && "
        f"git commit -qm 'agent swaps the prompt'\n{MARK}",
        "first.sh",
    )
    second = host.agent('for a; do last=$a; done; echo "prompt: $last"\n' + MARK, "second.sh")
    res = fks_run(f"{first}:1 -> {second}:1", "--prompt-file", "PROMPT.md")
    assert "TOPSECRET" not in res.output
    assert list(host.markers.iterdir()) == []


def fks_run(dsl: str, *args: str) -> Result:
    from fks_testing.helpers import fks

    return fks("run", dsl, *args, "--sandbox", timeout=180)


def test_forged_export_report_line_costs_only_the_agent(repo: Path, host: Host) -> None:
    """The agent prints the script's closing report line itself (it can read the nonce),
    claiming nothing to fetch and garbage besides: its commit is then simply not taken this
    iteration, and nothing else on the host moves or breaks."""
    body = f"""
{COMMIT_WORK}
printf 'fks-export %s end=1\\tbefore=x\\tafter=y\\twarning=\\033[31mforged\\n' "$FKS_NONCE" >&2
head -c 200000 /dev/zero | tr '\\0' Z >&2
"""
    res = sandbox(host.agent(body))
    assert res.code == 0, res.output[-3000:]  # a run-once step: complete
    host.check(res, merged=True)
    assert "\x1b" not in res.output and "ZZZZ" not in res.output  # swallowed, bounded


@pytest.mark.parametrize(
    ("then", "timeout"), [("sleep 60", 3), ("exit 3", 60)], ids=["sleep 60", "exit 3"]
)
def test_forged_success_report_claims_no_more_than_the_agent_could(
    repo: Path, host: Host, then: str, timeout: int
) -> None:
    """A report line saying `code=0`, printed by the agent before it overruns its time or
    fails: fks believes a report's success only for an iteration it did not kill, and a
    forged one can claim only the exit the agent could have chosen itself. (The agent that
    exits has time enough on a busy machine.)"""
    configure(repo, {"sandbox": {"timeout": timeout}})
    body = f"""
{COMMIT_WORK}
printf 'fks-export %s code=0\\tend=1\\tbefore=x\\tafter=y\\n' "$FKS_NONCE" >&2
{then}
"""
    res = sandbox(host.agent(body))  # a run-once step: complete when its iteration succeeds
    host.check(res, merged=res.code == 0)
    iteration = record(repo)["steps"][0]["iterations"][0]
    if then.startswith("sleep"):
        assert res.code == 1 and "timed out after 3s" in res.stdout, res.output[-3000:]
        assert iteration["reason"] == "timeout"
    else:  # believed: as if it had exited 0, which it could have
        assert res.code == 0 and iteration["exit_code"] == 0, res.output[-3000:]
    assert of_repo("ps", repo) == []


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_chatty_agent_still_times_out(repo: Path, host: Host, runtime: str) -> None:
    """Output every few milliseconds must not keep the clock from being read."""
    configure(repo, {"sandbox": {"timeout": 3}})
    res = sandbox(
        host.agent(f"{COMMIT_WORK}\nwhile :; do echo chatter; sleep 0.004; done") + ":1",
        *runtime_args(runtime),
    )
    assert res.code == 1 and "timed out after 3s" in res.stdout, res.output[-3000:]
    assert record(repo)["steps"][0]["iterations"][0]["reason"] == "timeout"
    host.check(res)
    assert of_repo("ps", repo) == []


def test_files_deleted_since_an_earlier_leftover_do_not_come_back(repo: Path, host: Host) -> None:
    """Iteration 1 leaves a file uncommitted; iteration 2 deletes it and leaves nothing
    uncommitted: the step lands without it (iteration 1's leftover commit is stale)."""
    body = (
        f"if [ -e scratch.txt ]; then rm scratch.txt; {MARK}; else echo scratch > scratch.txt; fi"
    )
    res = sandbox(host.agent(body) + ":2")
    assert res.code == 0, res.output[-3000:]
    host.check(res, merged=True)
    assert len(record(repo)["steps"][0]["iterations"]) == 2
    assert "scratch.txt" not in git(repo, "ls-tree", "-r", "--name-only", "main")
    assert not (repo / "scratch.txt").exists()
