"""`fks` started by forking a process that has already imported it.

Most of the CPU an `fks` command costs in the tests is Python importing fks and its libraries
(pydantic, docker-py, typer, rich: about 0.6 s of CPU of a sandboxed run's 1 s), paid again by
every one of the suite's thousands of commands. A zygote, one per test process, imports them
once; each command is a fork of it that sets argv, the working directory and the environment,
points its standard streams at files, runs the console script's `main` and exits with its code:
the same program, in a process of its own, with the exit code, output and signals a user gets.

What a fork cannot give is what a module reads from the environment when it is imported: a
command whose environment differs from the zygote's in such a variable (`IMPORT_TIME_ENV`) runs
as a new process instead, as does a command from a thread other than the main one.
`FKS_TEST_ZYGOTE=0` turns the zygote off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "sandbox_runner.cli.app",
    "sandbox_runner.commands.run",
    "sandbox_runner.commands.listing",
    "sandbox_runner.commands.forge",
    "sandbox_runner.commands.forge_backlog",
    "sandbox_runner.commands.forge_task",
    "sandbox_runner.commands.validate",
    "sandbox_runner.commands.logs",
    "sandbox_runner.commands.review",
    "sandbox_runner.commands.clean",
    "sandbox_runner.commands.init",
    "sandbox_runner.commands.chains",
    "sandbox_runner.commands.network",
    "sandbox_runner.backends.docker.backend",
    "sandbox_runner.backends.local",
    "sandbox_runner.steps.chain",
    "sandbox_runner.pulls.for_run",
    "sandbox_runner.forge.worker",
    "sandbox_runner.tasks.commands",
    "sandbox_runner.console.transcript",
    "docker",
    "tenacity",
    "netrc",
)
"""What the zygote imports before its first fork: the modules of `fks run` (local and
sandboxed), of `fks forge` and of the listings and other verbs nearly every test's commands
use (measured: what the forks imported themselves), not the web view's."""


def _warm() -> None:
    """What fks builds at its first command besides its imports, done once in the zygote: the
    click command tree (its first build loads parts of click) and the schemas of the pydantic
    models that wait for their first use. Neither depends on the environment."""
    import pydantic
    import typer.main

    from sandbox_runner.cli.app import app

    typer.main.get_command(app)
    waiting: list[type[pydantic.BaseModel]] = [pydantic.BaseModel]
    while waiting:
        for model in waiting.pop().__subclasses__():
            waiting.append(model)
            if model.__module__.startswith("sandbox_runner.") and not model.__pydantic_complete__:
                model.model_rebuild(raise_errors=False)


IMPORT_TIME_ENV = (
    "FKS_AGENT_IMAGE",
    "FKS_PROXY_IMAGE",
    "NPM_REGISTRY",
    "PYTHON",
    "PYDANTIC",
    "TERMINAL_WIDTH",
    "FORCE_TERMINAL",
    "_TYPER",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "TERM",
    "COLORTERM",
    "LANG",
    "LC_",
)
"""Prefixes of variables a module of fks or of its libraries may read when it is imported."""


def _import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


# --- the zygote's side -------------------------------------------------------------------------


def serve(requests: IO[str], replies: IO[str]) -> None:
    """Read one request per line, fork a command for it, reply with its pid, then its status."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    _warm()
    replies.write("ready\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, (requests, replies))
        replies.write(f"{pid}\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
        replies.flush()


def _child(request: dict[str, Any], channel: tuple[IO[str], IO[str]]) -> None:
    code = 1
    try:
        for stream in channel:
            os.close(stream.fileno())
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY),
            (2, request["stderr"], os.O_WRONLY),
        ):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = request["argv"]
        code = _run_main()
    finally:
        os._exit(code)


def _run_main() -> int:
    from sandbox_runner.cli import main

    code: object = 0
    try:
        main()
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr, flush=True)
    return 1


# --- the tests' side ---------------------------------------------------------------------------


_SERVE = "import sys, fks_testing.zygote as z; z.serve(sys.stdin, sys.stdout)"


class Zygote:
    """The test process's zygote, started at its first command."""

    def __init__(self, fks: str) -> None:
        self.fks = fks
        self.env = _import_time_env(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._reply() == "ready", "the fks zygote did not start"
        atexit.register(self.close)

    def close(self) -> None:
        """End the zygote (at the end of the test process): it leaves when its input closes."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _reply(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def serves(self, env: Mapping[str, str]) -> bool:
        return (
            self.process.poll() is None
            and threading.current_thread() is threading.main_thread()
            and _import_time_env(env) == self.env
        )

    def run(
        self, args: tuple[str, ...], cwd: Path | None, env: Mapping[str, str], timeout: float
    ) -> tuple[int, str, str]:
        assert self.process.stdin is not None
        with tempfile.TemporaryDirectory(prefix="fks-zygote-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            out.touch()
            err.touch()
            request = {
                "argv": [self.fks, *args],
                "cwd": str(cwd or Path.cwd()),
                "env": dict(env),
                "stdout": str(out),
                "stderr": str(err),
            }
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            pid = int(self._reply())
            code = self._wait(pid, args, timeout)
            return code, _text(out), _text(err)

    def _wait(self, pid: int, args: tuple[str, ...], timeout: float) -> int:
        done: list[str] = []
        waiter = threading.Thread(target=lambda: done.append(self._reply()), daemon=True)
        waiter.start()
        waiter.join(timeout)
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            waiter.join()
            raise subprocess.TimeoutExpired([self.fks, *args], timeout)
        return int(done[0])


def _text(path: Path) -> str:
    return path.read_bytes().decode(errors="replace")


_zygote: Zygote | None = None


def zygote(fks: str) -> Zygote | None:
    """This test process's zygote, or None when it is turned off."""
    global _zygote
    if os.environ.get("FKS_TEST_ZYGOTE", "1") == "0":
        return None
    if _zygote is None or _zygote.process.poll() is not None:
        _zygote = Zygote(fks)
    return _zygote
