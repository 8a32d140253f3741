"""What a sandboxed run checks before anything starts, once its engine answers: each image is
there (sent to a remote engine if fks can) and holds its agents, each network exists, and
Claude steps have credentials to take in."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.checks import check_agents_in_image
from sandbox_runner.backends.docker.settings import ALLOWLIST, CLAUDE_ENV
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.lookup import (
    DEFAULT_PROXY_IMAGE,
    image_user,
    require_image,
    stale_image_warning,
)

if TYPE_CHECKING:
    import docker

    from sandbox_runner.backends.docker.target import Target
    from sandbox_runner.plan.agents import AgentCommand


def prepare_image(
    client: docker.DockerClient, target: Target, image: str, warnings: list[str]
) -> str | None:
    """Make sure the engine has `image` (noting in `warnings` if it holds another fks or Claude
    Code than expected); the user it names (label fks.user), else None."""
    target.present(client, image)
    require_image(client, image)
    if warning := stale_image_warning(client, image):
        warnings.append(warning)
    return image_user(client, image)


def check_agents(client: docker.DockerClient, programs: dict[str, set[str]]) -> None:
    """Every image holds the programs its steps run."""
    for image, names in programs.items():
        check_agents_in_image(client, image, names)


def check_networks(client: docker.DockerClient, target: Target, wanted: set[str]) -> None:
    """The egress proxy's image when a step needs it (each Docker network of the user's was
    found by `check_engine`)."""
    if wanted & {ALLOWLIST, "none"}:
        target.present(client, DEFAULT_PROXY_IMAGE)
        require_image(client, DEFAULT_PROXY_IMAGE)


def check_credentials(agents: Iterable[AgentCommand]) -> None:
    """Claude in a container needs the host's credentials; the other agent CLIs do not run in
    one yet."""
    for agent in agents:
        if agent.kind == "cli" and agent.cli is not None:
            raise SandboxError(
                f"step '{agent.name}' runs {agent.cli.name}, which runs only without --sandbox "
                "for now; run it without --sandbox (fks refuses it as root there unless "
                "IS_SANDBOX=1)"
            )
        if agent.stream_json and not any(os.environ.get(v) for v in CLAUDE_ENV):
            raise SandboxError(
                f"step '{agent.name}' runs Claude in a container, which needs credentials from the host: "
                "set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (or ANTHROPIC_BASE_URL for a gateway)"
            )
