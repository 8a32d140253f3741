"""The Docker daemon, for every part of fks that talks to it: a connected client (or one line
saying why there is none and how to fix it), and Docker's errors reduced to one line.

Only the standard library at import time (`docker` is imported when a client is made), so the
image builder's `make-base` runs with any python3.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.errors import SandboxError
from sandbox_runner.programs import find_program

if TYPE_CHECKING:
    import docker


def docker_client(*, timeout: int = 60) -> docker.DockerClient:
    """A connected client, or SandboxError naming why there is none and how to fix it."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(_unreachable_daemon_message(exc)) from None
    return client


def _unreachable_daemon_message(exc: BaseException) -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    reason = root_cause(exc)
    if isinstance(reason, PermissionError):
        return (
            f"Permission denied on the Docker socket ({host}); add your user to the "
            "'docker' group ('sudo usermod -aG docker $USER', then log in again) or run as root"
        )
    installed = any(find_program(name) for name in ("dockerd", "docker"))
    socket_path = host.removeprefix("unix://") if host.startswith("unix://") else None
    if not installed and (socket_path is None or not Path(socket_path).exists()):
        return (
            f"Docker is not installed (no 'docker' or 'dockerd' on PATH, nothing at {host}); "
            "install it (e.g. 'sudo apt-get install docker.io') and start it"
        )
    return (
        f"Docker daemon not running (cannot connect to {host}: {one_line(reason)}); "
        "start it (e.g. 'sudo systemctl start docker' or 'dockerd &')"
    )


def root_cause(exc: BaseException) -> BaseException:
    """The innermost OS-level error behind a docker-py/requests exception chain."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        todo.extend(arg for arg in current.args if isinstance(arg, BaseException))
        if current.__cause__ is not None:
            todo.append(current.__cause__)
        if current.__context__ is not None:
            todo.append(current.__context__)
    return exc


def one_line(reason: BaseException | str) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    text = " ".join(str(reason).split())
    return text if len(text) <= 200 else text[:197] + "..."
