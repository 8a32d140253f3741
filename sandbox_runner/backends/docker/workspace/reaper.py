"""Removes a finished run's workspace volumes once fks has returned: Docker deletes a volume's
files before it answers (seconds for a large checkout), and nobody should wait for that.

`remove_in_background` forks a copy of fks that leaves at once, and that copy's own copy (in a
session of its own, so a Ctrl-C in the terminal does not reach it; in `/`; every descriptor it
inherited on /dev/null, so it holds no lock or file of the run) removes the volumes through a
Docker client of its own and exits. It imports nothing: all it runs was loaded before the fork,
so a module the run landed (`inspect.py`, a `sandbox_runner/` at the repository's top) never
runs in it, and it costs no start of a new Python. It only ever removes the volumes it is given.
What it leaves (it was killed, Docker went away) `fks clean` removes: the volumes carry the
run's labels.
"""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import FksError

if TYPE_CHECKING:
    import docker

IN_USE_WAIT_S = 120.0
"""How long a volume still in use (by a container being removed) is waited for."""


def remove_in_background(names: Sequence[str]) -> bool:
    """Remove the volumes `names` in a detached copy of this process; False if it could not
    start (then the caller removes them itself)."""
    if not names:
        return True
    _load()
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns of forking with threads: the copies only run this module.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        return False
    if pid == 0:
        _detach_and_remove(list(names))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _detach_and_remove(names: list[str]) -> NoReturn:
    """In the first copy: a new session, a second copy that removes the volumes, and out (so the
    remover is nobody's child to wait for). Never returns into fks's code."""
    code = 1
    try:
        os.setsid()
        if os.fork() == 0:
            code = 1
            _let_go()
            code = remove_all(names)
        else:
            code = 0
    finally:
        os._exit(code)


def _let_go() -> None:
    """Default signal dispositions, `/` as working directory, and every inherited descriptor
    pointed at /dev/null (not closed: a Python object of fks's closing it later closes nothing
    of the remover's)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_DFL)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    inherited = [int(entry.name) for entry in Path("/dev/fd").iterdir()]
    for fd in inherited:
        if fd != null:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)


def _load() -> None:
    """Import what the remover runs, before the fork (docker stays out of `fks`'s start);
    `netrc` is what requests imports at a session's first request."""
    import netrc

    import docker.errors
    import tenacity

    del docker, netrc, tenacity


def remove_volumes(client: docker.DockerClient, names: Sequence[str]) -> None:
    """Remove each volume, waiting out one still in use by a container Docker is removing."""
    import docker.errors
    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

    def in_use(exc: BaseException) -> bool:
        return isinstance(exc, docker.errors.APIError) and exc.status_code == 409

    for name in names:
        retrying = Retrying(
            retry=retry_if_exception(in_use),
            wait=wait_exponential(multiplier=0.2, max=5),
            stop=stop_after_delay(IN_USE_WAIT_S),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt, contextlib.suppress(docker.errors.NotFound):
                    # Not forced: Docker would drop a volume in use from its list (labels and
                    # all) and delete it only later, out of sight of `fks clean`.
                    client.volumes.get(name).remove()
        except docker.errors.DockerException:
            continue  # fks clean removes it


def remove_all(names: Sequence[str]) -> int:
    """Remove the volumes `names` with a client of this process's own: 0, or 1 without one."""
    try:
        client = docker_client()
    except FksError:
        return 1
    remove_volumes(client, names)
    return 0
