"""`fks image build` and `fks image push`: the agent image the Docker sandbox runs, built here
and made present on other engines."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from sandbox_runner.errors import UsageError


def build(
    *,
    base_image: str | None,
    ca_certs: list[Path],
    tag: str | None,
    claude_version: str | None = None,
    from_image: str | None = None,
    devcontainer: Path | None = None,
) -> int:
    from sandbox_runner.images import versions
    from sandbox_runner.images.build import build_agent_image
    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE

    if from_image is not None and base_image is not None:
        raise UsageError(
            "--from and --base-image cannot be used together: --from puts the agent layer on "
            "your image, --base-image chooses the base of the default one"
        )
    if from_image is not None and not from_image.strip():
        raise UsageError("--from needs an image name (e.g. --from my-toolchain:latest)")
    if devcontainer is not None and (from_image is not None or base_image is not None):
        raise UsageError("--devcontainer cannot be used with --from or --base-image")
    version = versions.resolve_claude_version(claude_version, ca_certs=ca_certs)
    if devcontainer is not None:
        from sandbox_runner.images.devcontainer import build_devcontainer_image

        build_devcontainer_image(devcontainer, ca_certs=ca_certs, claude_version=version, tag=tag)
        return 0
    if from_image is not None:
        from sandbox_runner.images.derived import build_derived_image

        build_derived_image(from_image, ca_certs=ca_certs, claude_version=version, tag=tag)
        return 0
    build_agent_image(
        base_image=base_image,
        ca_certs=ca_certs,
        tag=tag or DEFAULT_AGENT_IMAGE,
        claude_version=version,
    )
    return 0


def push(*, engine: str, images: Sequence[str]) -> int:
    """Make `images` (default: the agent's and the egress proxy's) present on `engine`."""
    from sandbox_runner.backends.docker.engines import engine_client
    from sandbox_runner.errors import UsageError
    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE
    from sandbox_runner.images.push import push_images
    from sandbox_runner.plan.engine import EngineSpec

    try:
        spec = EngineSpec.parse(engine)
    except ValueError as exc:
        raise UsageError(f"--engine: {exc}") from None
    wanted = list(dict.fromkeys(images)) or [DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE]
    push_images(spec, wanted, connect=engine_client, out=sys.stdout)
    return 0
