"""The one way fks runs git (`run_git`, a plain subprocess: no GitPython import, so start-up
stays fast), `git`/`git_ok` on top of it, and the quick queries: where a work tree and its git
directory are, and whether an iteration made progress — a fingerprint of HEAD plus the state of
every changed or untracked file, from one `git status` call.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from sandbox_runner.errors import WorkspaceError
from sandbox_runner.programs import find_program, host_env

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}

HOST_CONFIG = (
    *("-c", "core.hooksPath=/dev/null"),
    *("-c", "core.fsmonitor=false"),
    *("-c", "safe.bareRepository=explicit"),
    *("-c", "log.showSignature=false"),
)
"""Given to every git fks runs: no hook runs (a `core.hooksPath` may name a folder of the work
tree, whose hooks a landing has just written, and `.git/hooks` may read tracked files such as
`.pre-commit-config.yaml`), no file system monitor, no bare repository found by looking around
the working directory (one can be committed as plain files), and no signature an agent made
handed to a verifying program when its commits are listed."""

_REPOSITORY_ENV = frozenset(
    {
        *("GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_COMMON_DIR"),
        *("GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"),
        *("GIT_GRAFT_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX"),
        *("GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_CONFIG"),
    }
)
"""What would make git work on another repository than the one its working directory is in
(set when fks is started from a git hook, say): fks always names the repository by `cwd`."""


def git_argv(cwd: Path | None, *args: str) -> list[str]:
    """The command line of `git *args` run in `cwd` (None: here) as fks runs it: git found in
    `PATH`'s absolute entries outside the repository `cwd` is in (an empty or relative entry,
    or one in the repository, would find a `git` it holds), then `HOST_CONFIG`."""
    program = find_program("git", outside=cwd or Path())
    if program is None:
        raise FileNotFoundError(2, "git is not installed (not found on PATH)", "git")
    return [program, *HOST_CONFIG, *args]


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a git fks runs: this one without `_REPOSITORY_ENV`, with `PATH` and
    `PYTHONPATH` limited to absolute entries (for the programs git itself starts), plus `extra`."""
    env = {k: v for k, v in host_env().items() if k not in _REPOSITORY_ENV}
    return {**env, **(extra or {})}


MAX_GIT_OUTPUT = 16 * 1024 * 1024
"""The most `git()` reads of a command's output; more is refused (the agent can make some
commands, such as a diff of its commits, print without bound)."""
_STDERR_KEPT = 64 * 1024
_CHUNK = 64 * 1024


def run_git(
    cwd: Path | None,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    limit: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `git *args` in `cwd` with the C locale; output captured as bytes (or written to
    `stdout`), never checked.

    Memory stays bounded whatever git prints: of stderr only the last 64 KiB are kept, and of
    stdout, with a `limit`, the first `limit + 1` bytes (more than `limit`: it printed more).
    The rest is read and dropped, so git never blocks on a full pipe.
    """
    with subprocess.Popen(
        git_argv(cwd, *args),
        cwd=cwd,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        env=git_env({"LC_ALL": "C", **(env or {})}),
    ) as proc:
        assert proc.stderr is not None
        errors = _Tail(proc.stderr, _STDERR_KEPT)
        errors.start()
        out = b"" if proc.stdout is None else _head(proc.stdout, limit)
        errors.join()
        code = proc.wait()
    return subprocess.CompletedProcess(["git", *args], code, out, errors.data)


def _head(stream: IO[bytes], limit: int | None) -> bytes:
    """The first `limit + 1` bytes of `stream` (all of it without a limit); the rest drained."""
    if limit is None:
        return stream.read()
    kept = bytearray()
    while chunk := stream.read(_CHUNK):
        if len(kept) <= limit:
            kept += chunk[: limit + 1 - len(kept)]
    return bytes(kept)


class _Tail(threading.Thread):
    """Reads a stream to its end in the background, keeping only its last `size` bytes."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        super().__init__(daemon=True)
        self._stream = stream
        self._size = size
        self.data = b""

    def run(self) -> None:
        while chunk := self._stream.read(_CHUNK):
            self.data = (self.data + chunk)[-self._size :]


@contextlib.contextmanager
def git_process(cwd: Path, *args: str, stdin: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """`git *args` running in `cwd`, its stdout (and stdin, if asked) a pipe for the caller to
    stream; stderr is dropped. Killed, if still running, when the block ends: a caller that has
    read enough stops git there."""
    with subprocess.Popen(
        git_argv(cwd, *args),
        cwd=cwd,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=git_env(_GIT_ENV),
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_git(cwd, *args, env=_GIT_ENV)


class GitError(WorkspaceError):
    """A git command failed (message carries argv, exit code and stderr)."""


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    limit: int = MAX_GIT_OUTPUT,
) -> str:
    """Run git; returns stdout stripped. Raises GitError naming the command on failure, and
    when it prints more than `limit` bytes (whether `check` or not)."""
    # As GitPython's `Git.execute` did before this: a directory that cannot be entered means
    # the current one, LANGUAGE=C too, and one trailing newline dropped.
    where = cwd if os.access(cwd, os.X_OK) else None
    done = run_git(where, *args, env={"LANGUAGE": "C", "LC_ALL": "C", **(env or {})}, limit=limit)
    if len(done.stdout) > limit:
        raise GitError(
            f"git {' '.join(args)[:200]} in {cwd} printed more than {limit} bytes; refused"
        )
    status, out, err = done.returncode, _decoded(done.stdout), _decoded(done.stderr)
    if check and status != 0:
        detail = (err or out or "").strip().splitlines()
        tail = " / ".join(detail[-3:]) if detail else "no output"
        raise GitError(f"git {' '.join(args)} failed in {cwd} (exit {status}): {tail}")
    return out


@contextlib.contextmanager
def git_output(cwd: Path, *args: str) -> Iterator[IO[bytes]]:
    """Run git and read its stdout as it comes, for output too big to hold. Leaving the block
    before the end stops git; raises GitError when git fails on its own."""
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(
            git_argv(cwd, *args),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=git_env({"LANGUAGE": "C", **_GIT_ENV}),
        ) as proc,
    ):
        assert proc.stdout is not None
        try:
            yield proc.stdout
        except BaseException:
            proc.kill()
            raise
        finally:
            proc.stdout.close()  # a git still writing gets SIGPIPE
            status = proc.wait()
        if status not in (0, -signal.SIGPIPE):
            err.seek(0)
            detail = _decoded(err.read(4096)).strip().splitlines()
            tail = " / ".join(detail[-3:]) if detail else "no output"
            raise GitError(f"git {' '.join(args)} failed in {cwd} (exit {status}): {tail}")


def git_head(cwd: Path, *args: str, limit: int) -> tuple[bytes, bool]:
    """The first `limit` bytes of git's output (True: there was more; git is stopped there,
    so a huge output is never read). Raises GitError when git fails before that."""
    with git_output(cwd, *args) as out:
        data = out.read(limit + 1)
    return data[:limit], len(data) > limit


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape").removesuffix("\n")


def git_ok(cwd: Path, *args: str) -> bool:
    try:
        git(cwd, *args)
    except GitError:
        return False
    return True


def _rev_parse_path(path: Path, *args: str) -> Path | None:
    try:
        done = _git(path, "rev-parse", *args)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if done.returncode != 0:
        return None
    return Path(os.fsdecode(done.stdout.strip()))


def git_toplevel(path: Path) -> Path | None:
    """The work tree `path` is in, or None outside git (or without git installed)."""
    return _rev_parse_path(path, "--show-toplevel")


def git_common_dir(path: Path) -> Path | None:
    """The repository's shared git directory (`.git` of the main work tree), or None."""
    return _rev_parse_path(path, "--path-format=absolute", "--git-common-dir")


def workspace_fingerprint(top: Path) -> str | None:
    """A digest that changes when a commit is made or any file is changed, added or removed.

    `top` is the work tree's top directory (git prints paths relative to it).
    """
    done = _git(top, "status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all")
    if done.returncode != 0:
        return None
    digest = hashlib.sha1(done.stdout)
    for entry in done.stdout.split(b"\0"):
        if not entry or entry.startswith(b"#"):
            continue
        # The path is the last space-separated field (renames put the origin in the next entry).
        name = entry.rsplit(b" ", 1)[-1] if entry[:1] in (b"1", b"2", b"u") else entry[2:]
        try:
            st = os.lstat(top / os.fsdecode(name))
        except OSError:
            continue
        digest.update(f"{st.st_mtime_ns}:{st.st_size}".encode())
    return digest.hexdigest()
