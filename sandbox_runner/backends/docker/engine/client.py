"""Calling the Docker API: a ping, volumes, and transient failures retried with back-off
(connecting to the daemon is `sandbox_runner.docker_daemon`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker
    from tenacity import Retrying

T = TypeVar("T")


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


def remove_secret(client: docker.DockerClient, secret: str, *, quiet: bool = True) -> None:
    """Remove a swarm secret; one still referenced by a service being removed is tried again
    for a few seconds."""
    import docker.errors

    from sandbox_runner.docker_daemon import one_line

    deadline = time.monotonic() + 10
    while True:
        try:
            client.api.remove_secret(secret)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if time.monotonic() >= deadline:
                if quiet:
                    return
                raise SandboxError(
                    f"Could not remove the swarm secret {secret[:12]}: "
                    f"{one_line(str(exc.explanation or exc))}"
                ) from None
            time.sleep(0.2)


def remove_tolerant(remove: Callable[[], object]) -> None:
    """Run a removal; 404 (gone already) and 409 (being removed) count as done."""
    import docker.errors

    try:
        with_retries("remove", remove)
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):
            raise
