"""The attacker harness: what an agent in the sandbox may try, and what it must leave alone on
the host (markers, paths outside the repository, refs, `git fsck`)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from fks_testing.helpers import Result, git
from fks_testing.sandboxed import add_script, record

MARK = "echo FORKHESTRA_COMPLETE"
EX = ".git/fks-export"
# The agent's own export, left in place by killing the wrapper script (its parent) so it
# cannot replace it: `end=1` makes it look complete.
OWN_INFO = f'rm -rf {EX}; mkdir -p {EX}; printf "before=a\\nafter=b\\nend=1\\n" > {EX}/info'
KILL_WRAPPER = "kill -9 $PPID; sleep 5"

IMPORTED_FIRST = ("inspect.py", "subprocess.py", "sandbox_runner/__init__.py", "docker/__init__.py")
"""Modules a Python process would take from its working directory, were that on its module
path, before its own: standard library ones, fks's own package, a dependency of fks."""


def module_payloads(markers: Path) -> dict[str, str]:
    """Each of `IMPORTED_FIRST`, leaving a marker named after it in `markers` when imported."""
    return {
        name: f"import pathlib\npathlib.Path({str(markers / name.replace('/', '-'))!r}).touch()\n"
        for name in IMPORTED_FIRST
    }


def writing(files: dict[str, str]) -> str:
    """Shell lines that write `files` (relative paths, their folders made)."""
    return "".join(
        f"mkdir -p \"$(dirname {name})\" && cat > {name} <<'EOF'\n{text}EOF\n"
        for name, text in files.items()
    )


class Host:
    """What an attack must leave alone on the host, recorded before the run."""

    def __init__(self, repo: Path, tmp_path: Path) -> None:
        self.repo = repo
        self.tmp = tmp_path
        self.markers = tmp_path / "markers"
        self.markers.mkdir()
        self.secret = tmp_path / "secret.txt"
        self.secret.write_text("TOPSECRET-host-only\n")
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.refs: dict[str, str] = {}
        self.paths: list[str] = []

    def agent(self, body: str, name: str = "attack.sh") -> str:
        """Commit `body` as a shell-script agent, then record the host as it is; returns the
        agent's DSL step."""
        add_script(self.repo, name, "#!/bin/sh\nset -u\n" + body + "\n")
        self.refs = refs(self.repo)
        self.paths = outside_repo(self.tmp, self.repo)
        return f"./scripts/{name}"

    def payload(self, name: str) -> str:
        """A command that leaves a marker only where the host can see it (never fails)."""
        return f"touch {self.markers}/{name} 2>/dev/null; true"

    def check(self, res: Result, *, merged: bool = False) -> None:
        """Nothing ran on, or was written to, the host; only the step branch (and the base,
        when the step legitimately merged) moved; the user's repository is sound."""
        assert sorted(p.name for p in self.markers.iterdir()) == []
        assert outside_repo(self.tmp, self.repo) == self.paths
        assert "Traceback" not in res.output, res.output[-3000:]
        assert "TOPSECRET" not in res.output
        fsck = subprocess.run(
            ["git", "fsck", "--full", "--no-dangling"],
            cwd=self.repo,
            capture_output=True,
            text=True,
            check=False,
        )
        assert fsck.returncode == 0 and not fsck.stdout.strip(), fsck.stdout + fsck.stderr
        after = refs(self.repo)
        step = record(self.repo)["steps"][0]["branch"]
        moved = {
            ref for ref in after.keys() | self.refs.keys() if after.get(ref) != self.refs.get(ref)
        }
        allowed = {f"refs/heads/{step}"} | ({"refs/heads/main"} if merged else set())
        assert moved <= allowed, moved
        if not merged:
            assert after["refs/heads/main"] == self.refs["refs/heads/main"]
        assert git(self.repo, "status", "--porcelain") == ""
        assert (self.repo / ".forge").is_dir() and not (self.repo / ".forge").is_symlink()


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def outside_repo(tmp_path: Path, repo: Path) -> list[str]:
    """Every path under tmp_path that is not in the user's repository, with its kind."""
    found = []
    for root, dirs, files in os.walk(tmp_path):
        here = Path(root)
        if here == repo:
            dirs.clear()
            continue
        found += [f"{here / name}:{_kind(here / name)}" for name in (*dirs, *files)]
    return sorted(found)


def _kind(path: Path) -> str:
    mode = path.lstat().st_mode
    return "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file"


def one_line(res: Result, phrase: str) -> str:
    """The single output line that says `phrase` (a clear message, not a wall of text)."""
    lines = [line for line in res.output.splitlines() if phrase in line]
    assert lines, res.output[-3000:]
    assert len(lines[0]) < 600, lines[0]
    return lines[0]


def step_tip(repo: Path) -> str:
    return git(repo, "rev-parse", record(repo)["steps"][0]["branch"])


def textconv_repository(path: Path, marker: Path, *, bare: bool) -> tuple[str, str]:
    """A repository at `path` (bare, or with a work tree) whose own config runs a program that
    leaves `marker` for each file a diff shows, with a branch `fks/planted` of two commits:
    (its first commit, its tip)."""
    from fks_testing.helpers import init_repo

    work = init_repo(path.with_name(path.name + "-src") if bare else path, {"a.txt": "one\n"})
    start = git(work, "rev-parse", "HEAD")
    git(work, "switch", "-q", "-c", "fks/planted")
    (work / "a.txt").write_text("two\n")
    git(work, "commit", "-qam", "two")
    tip = git(work, "rev-parse", "HEAD")
    if bare:
        git(work, "clone", "-q", "--bare", str(work), str(path))
    git_dir = path if bare else path / ".git"
    subprocess.run(
        [
            "git",
            "config",
            "--file",
            str(git_dir / "config"),
            "diff.evil.textconv",
            f"touch {marker}; cat",
        ],
        check=True,
    )
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text("* diff=evil\n")
    return start, tip


def planted_record(project: Path, run_id: str, names: Path, start: str) -> None:
    """A run record in `project`'s `.forge/` (as a cloned repository may ship one) whose run
    and step name `names` as where they ran, its step on `fks/planted` from `start`."""
    from fks_testing.runlogs import write_run

    write_run(project, run_id, steps=[1], branches=["fks/planted"], base_commit=start)
    path = project / ".forge" / "runs" / run_id / "run.json"
    data = json.loads(path.read_text())
    data["cwd"] = data["steps"][0]["repo"] = str(names)
    data["steps"][0]["merged"] = True  # its diff is shown, nothing asked of its base
    path.write_text(json.dumps(data))


# What one step leaves in the workspace that its snapshot does not see (so it is not committed
# as leftovers): a forged index hiding changed files, folders swapped behind it (one left
# read-only), ignored files (one folder unreadable) and a nested repository, hostile git config
# and hooks, a poisoned local object.
DIRTY_AGENT = """#!/bin/sh
set -u
echo "INODE $(stat -c "%i %.9Z" untouched.txt)"
printf 'evil!\\n' > README.md
mtime=$(stat -c %Y racy.txt) && printf 'RACY\\n' > racy.txt && touch -d "@$mtime" racy.txt
mv dir1 tmp-dir && mv dir2 dir1 && mv tmp-dir dir2
git update-index --assume-unchanged README.md racy.txt dir1/f dir2/f
echo junk > debug.log && mkdir -p cache/nested && git -C cache/nested init -q && echo x > cache/x
good=$(git rev-parse HEAD:README.md) && bad=$(printf 'evil!\\n' | git hash-object -w --stdin)
g=$(echo "$good" | cut -c1-2)/$(echo "$good" | cut -c3-) && b=$(echo "$bad" | cut -c1-2)/$(echo "$bad" | cut -c3-)
mkdir -p .git/objects/${good%${good#??}} && cp .git/objects/$b .git/objects/$g
printf '#!/bin/sh\\necho hooked > /workspace/HOOKED.log\\n' > .git/hooks/post-checkout
chmod +x .git/hooks/post-checkout && git config core.hooksPath .git/hooks
git config core.sparseCheckout true && echo README.md > .git/info/sparse-checkout
git config core.checkStat minimal && git config core.trustctime false
git config core.fsmonitor 'echo fsmonitor > /workspace/FSMONITOR.log; false'
mkdir -p cache/locked && touch cache/locked/x && chmod 000 cache/locked && chmod a-w dir2
TAMPER
echo FORKHESTRA_COMPLETE
"""

CHECK_AGENT = """#!/bin/sh
bad() { echo "CHECK-FAIL $*"; }
echo "INODE $(stat -c "%i %.9Z" untouched.txt)"
echo "HEAD $(git rev-parse HEAD)"
left=$(GIT_INDEX_FILE=/tmp/fresh sh -c 'git read-tree HEAD && git status --porcelain --ignored -uall')
[ -z "$left" ] || bad "not exactly the commit: $left"
[ -z "$(git status --porcelain --ignored -uall)" ] || bad "the index disagrees"
FILES
[ -z "$(git ls-files -v | grep -v '^H ')" ] || bad "index flags"
[ -z "$(git config --get-regexp 'core[.](hookspath|fsmonitor|sparsecheckout|worktree)')" ] || bad config
[ "$(git config core.checkStat)/$(git config core.trustctime)" = default/true ] || bad config
[ -z "$(ls .git/hooks .git/info 2>/dev/null)" ] || bad "hooks or info"
[ -z "$(find .git/objects -type f ! -path '*/info/*')" ] || bad "local objects"
[ -z "$(find . -path ./.git -prune -o \\( -name .git -o -type p -o -type s \\) -print)" ] || bad "unseen"
echo CHECK-DONE
echo FORKHESTRA_COMPLETE
"""


def check_agent(paths: str, content: str) -> str:
    """CHECK_AGENT, which also checks that the files `paths` hold `content` (printf's)."""
    return CHECK_AGENT.replace(
        "FILES", f'[ "$(cat {paths})" = "$(printf \'{content}\')" ] || bad files'
    )
