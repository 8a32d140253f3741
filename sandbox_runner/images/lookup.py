"""The images an engine has: fks's default names, whether an image exists, requiring one (with
the command that builds it), pulling one, and what its labels say."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sandbox_runner.docker_daemon import one_line, root_cause
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.versions import version_warning
from sandbox_runner.labels import LABEL_FROM, LABEL_USER

if TYPE_CHECKING:
    import docker

# FKS_AGENT_IMAGE and FKS_PROXY_IMAGE name other defaults (CI jobs of several checkouts on
# one engine).
DEFAULT_AGENT_IMAGE = os.environ.get("FKS_AGENT_IMAGE") or "fks-agent:latest"
DEFAULT_PROXY_IMAGE = os.environ.get("FKS_PROXY_IMAGE") or "fks-proxy:latest"

# A pull that gets no answer for this long is given up (the daemon fails at once when DNS
# cannot resolve the registry; this bounds a hanging one).
PULL_TIMEOUT_S = 60


def image_exists(client: docker.DockerClient, name: str) -> bool:
    """Whether `client`'s engine has the image `name` (a tag or an id)."""
    import docker

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


def require_image(client: docker.DockerClient, name: str) -> None:
    """SandboxError with the command that builds `name` when it is not present locally."""
    if image_exists(client, name):
        return
    if name in (DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE):
        raise SandboxError(f"Image {name!r} not found; build it with {build_command(name)!r}")
    raise SandboxError(
        f"Image {name!r} not found{_close_local(client, name)}; check the name with "
        f"'docker images', or build fks's agent image under it with {build_command(name)!r}"
    )


def _close_local(client: docker.DockerClient, name: str) -> str:
    """` (did you mean 'x'?)` for a local image tag close to `name`."""
    import difflib

    try:
        tags = [t for image in client.images.list() for t in image.tags]
    except Exception:  # only a hint: an engine that cannot list gives none
        return ""
    close = difflib.get_close_matches(name, tags, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build_command(name: str) -> str:
    """The `fks image build` that makes the image `name`."""
    built_by_default = name in (DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE)
    return "fks image build" if built_by_default else f"fks image build --tag {name}"


def image_user(client: docker.DockerClient, name: str) -> str | None:
    """The user an image asks its containers to run as (label fks.user), if any."""
    user = (client.images.get(name).labels or {}).get(LABEL_USER)
    return user if isinstance(user, str) and user else None


def stale_image_warning(client: docker.DockerClient, name: str) -> str | None:
    """A line saying `name` holds another fks or Claude Code than expected (see versions)."""
    labels = client.images.get(name).labels or {}
    base = labels.get(LABEL_FROM)
    rebuild = f"fks image build --from {base}" if base else build_command(name)
    return version_warning(name, labels, rebuild=rebuild)


def pull_image(client: docker.DockerClient, name: str) -> None:
    """Pull `name`, bounded by PULL_TIMEOUT_S of silence; SandboxError with the reason on failure."""
    import docker

    repository, tag = split_tag(name)
    saved_timeout = client.api.timeout  # docker-py's pull() takes no timeout of its own
    client.api.timeout = PULL_TIMEOUT_S
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise SandboxError(f"cannot pull {name}: {one_line(event['error'])}")
    except docker.errors.APIError as exc:
        detail = exc.explanation or str(exc)
        raise SandboxError(f"cannot pull {name}: {one_line(detail)}") from None
    except (docker.errors.DockerException, OSError) as exc:  # timeouts, dropped connections
        raise SandboxError(f"cannot pull {name}: {one_line(root_cause(exc))}") from None
    finally:
        client.api.timeout = saved_timeout


def split_tag(name: str) -> tuple[str, str]:
    repository, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:  # no tag, or the colon belongs to a registry port
        return name, "latest"
    return repository, tag
