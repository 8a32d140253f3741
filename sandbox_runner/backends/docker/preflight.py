"""What a sandboxed run checks before anything starts, once its engine answers: each image is
there (sent to a remote engine if fks can) and holds its agents (the agent CLIs its label
names), each network exists, and agent CLI steps have credentials for the egress proxy."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.checks import check_agents_in_image
from sandbox_runner.backends.docker.settings import ALLOWLIST, CLAUDE_ENV
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.clis import AGENT_CLIS, clis_in
from sandbox_runner.images.lookup import (
    DEFAULT_PROXY_IMAGE,
    build_command,
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


def check_clis(client: docker.DockerClient, steps: Iterable[tuple[str, AgentCommand]]) -> None:
    """The image of each step that runs an agent CLI other than Claude holds it, as its label
    says (an image that is not fks's has its PATH asked by `check_agents`)."""
    for image, agent in steps:
        cli = agent.cli
        if agent.kind != "cli" or cli is None or "/" in agent.program:
            continue
        held = clis_in(client.images.get(image).labels)
        if held is None or cli.name in held:
            continue
        names = ",".join(name for name in AGENT_CLIS if name in held | {cli.name})
        raise SandboxError(
            f"step '{agent.name}' runs {cli.title}, which image {image} does not hold; put it "
            f"in with '{build_command(image)} --with {names}'"
        )


def check_networks(client: docker.DockerClient, target: Target, wanted: set[str]) -> None:
    """The egress proxy's image when a step needs it (each Docker network of the user's was
    found by `check_engine`)."""
    if wanted & {ALLOWLIST, "none"}:
        target.present(client, DEFAULT_PROXY_IMAGE)
        require_image(client, DEFAULT_PROXY_IMAGE)


def check_credentials(agents: Iterable[AgentCommand]) -> None:
    """An agent CLI in a container needs the host's credentials (the egress proxy adds them to
    its requests)."""
    for agent in agents:
        cli = agent.cli
        if agent.kind == "cli" and cli is not None:
            if not any(os.environ.get(v) for v in cli.key_vars):
                raise SandboxError(
                    f"step '{agent.name}' runs {cli.title} in a container, which needs its key "
                    f"from the host: set {' or '.join(cli.key_vars)} (the egress proxy adds it "
                    "to the requests; it never enters the container)"
                )
            continue
        if agent.stream_json and not any(os.environ.get(v) for v in CLAUDE_ENV):
            raise SandboxError(
                f"step '{agent.name}' runs Claude in a container, which needs credentials from the host: "
                "set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (or ANTHROPIC_BASE_URL for a gateway)"
            )
