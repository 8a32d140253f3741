"""The Docker client: connecting (with one line saying why not and how to fix it), and calling
the API with transient failures retried with back-off."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker
    from tenacity import Retrying

T = TypeVar("T")


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
    installed = any(shutil.which(name) for name in ("dockerd", "docker"))
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


def ping(client: docker.DockerClient) -> None:
    """Fail with one clear line when the daemon does not answer."""
    try:
        client.ping()
    except Exception as exc:
        raise SandboxError(
            f"Docker daemon not answering ({exc}); start it (e.g. 'sudo systemctl start docker' or 'dockerd &')"
        ) from None


def _transient(exc: BaseException) -> bool:
    """Errors worth retrying: the daemon hiccuped, not the request was wrong."""
    import docker.errors
    import requests.exceptions

    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return True
    if isinstance(exc, docker.errors.APIError) and not isinstance(exc, docker.errors.NotFound):
        status = exc.status_code or 0
        text = str(exc).lower()
        if is_missing_executable(text):
            return False
        return status >= 500 or status == 429
    return False


def is_missing_executable(text: str) -> bool:
    return "executable file not found" in text or (
        "no such file or directory" in text and "exec" in text
    )


def _retrying(what: str) -> Retrying:
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    return Retrying(
        retry=retry_if_exception(_transient),
        wait=wait_exponential(multiplier=0.5, min=0.5, max=8),
        stop=stop_after_attempt(6),
        reraise=True,
    )


def with_retries(what: str, fn: Callable[[], T]) -> T:
    """Call a Docker API operation, retrying transient failures with back-off."""
    result: T = _retrying(what)(fn)
    return result


def volume_exists(client: docker.DockerClient, name: str) -> bool:
    import docker.errors

    try:
        with_retries("volume", lambda: client.volumes.get(name))
    except docker.errors.NotFound:
        return False
    return True


def ensure_volume(client: docker.DockerClient, name: str, labels: Mapping[str, str]) -> None:
    """Create volume `name` with `labels` unless it exists."""
    if not volume_exists(client, name):
        with_retries("volume", lambda: client.volumes.create(name=name, labels=dict(labels)))


def remove_volume(client: docker.DockerClient, name: str) -> None:
    """Remove a workspace volume; gone already, or being removed, is fine."""
    import docker.errors

    def remove() -> None:
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(name).remove(force=True)

    try:
        with_retries("volume remove", remove)
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise
