"""`fks image build`: build and tag the agent image the Docker sandbox runs."""

from __future__ import annotations

from pathlib import Path


def build(
    *,
    base_image: str | None,
    ca_certs: list[Path],
    tag: str | None,
    claude_version: str | None = None,
) -> int:
    from sandbox_runner.backends.docker import images, versions

    version = versions.resolve_claude_version(claude_version, ca_certs=ca_certs)
    images.build_agent_image(
        base_image=base_image,
        ca_certs=ca_certs,
        tag=tag or images.DEFAULT_AGENT_IMAGE,
        claude_version=version,
    )
    return 0
