"""Removes a finished run's workspace volumes once fks has returned: Docker deletes a volume's
files before it answers (seconds for a large checkout), and nobody should wait for that.

`remove_in_background` starts `python -P -m sandbox_runner.backends.docker.workspace.reaper VOLUME…`
in a session of its own (Ctrl-C in the terminal does not reach it), in `/`: nothing of the
repository it was started from (a landed `inspect.py`, say) is on its module path. It only ever
removes the volumes it is given. What it leaves (it was killed, Docker went away) `fks clean` removes: the
volumes carry the run's labels.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import FksError
from sandbox_runner.programs import fks_python, host_env

if TYPE_CHECKING:
    import docker

IN_USE_WAIT_S = 120.0
"""How long a volume still in use (by a container being removed) is waited for."""


def remove_in_background(names: Sequence[str]) -> bool:
    """Start a detached process that removes the volumes `names`; False if it could not start."""
    if not names:
        return True
    try:
        subprocess.Popen(
            fks_python(__name__, *names),
            cwd="/",
            env=host_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return False
    return True


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


def main(names: Sequence[str]) -> int:
    try:
        client = docker_client()
    except FksError:
        return 1
    remove_volumes(client, names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
