"""Calling the Docker API: a ping, volumes, containers created, and transient failures retried
with back-off (connecting to the daemon is `sandbox_runner.docker_daemon`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container
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


def remove_tolerant(remove: Callable[[], object]) -> None:
    """Run a removal; 404 (gone already) and 409 (being removed) count as done."""
    import docker.errors

    try:
        with_retries("remove", remove)
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):
            raise


def create_container(
    client: docker.DockerClient,
    kwargs: dict[str, Any],
    *,
    what: str = "the container",
    stdin_once: bool = False,
) -> Container:
    """`containers.create` with retries; a missing image or a refusal is one clear line.
    `stdin_once`: stdin closes when the one client attached to it lets go."""
    import docker.errors

    create = (lambda: _create_stdin_once(client, kwargs)) if stdin_once else None
    try:
        return with_retries("create", create or (lambda: client.containers.create(**kwargs)))
    except docker.errors.ImageNotFound:
        raise SandboxError(
            f"Image '{kwargs['image']}' not found; build it with 'fks image build'"
        ) from None
    except docker.errors.APIError as exc:
        raise SandboxError(f"Docker could not create {what}: {exc.explanation or exc}") from None


def _create_stdin_once(client: docker.DockerClient, kwargs: dict[str, Any]) -> Container:
    """docker-py sets StdinOnce only for attached (not detached) containers: set it here."""
    from docker.models.containers import _create_container_args

    args = _create_container_args({**kwargs, "version": client.api._version})
    name, platform = args.pop("name", None), args.pop("platform", None)
    config = client.api.create_container_config(**args)
    config["StdinOnce"] = True
    created = client.api.create_container_from_config(config, name, platform)
    return client.containers.prepare_model({"Id": created["Id"]})  # no inspect: it is new
