"""`fks image build` and `fks image push`: the agent image the Docker sandbox runs, built here
and made present on other engines."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def build(*, base_image: str | None, ca_certs: list[Path], tag: str | None) -> int:
    from sandbox_runner.backends.docker import images

    images.build_agent_image(
        base_image=base_image, ca_certs=ca_certs, tag=tag or images.DEFAULT_AGENT_IMAGE
    )
    return 0


def push(*, engine: str, images: Sequence[str]) -> int:
    """Make `images` (default: the agent's and the egress proxy's) present on `engine`."""
    from sandbox_runner.backends.docker.images import DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE
    from sandbox_runner.backends.docker.push import push_images
    from sandbox_runner.errors import UsageError
    from sandbox_runner.plan.engine import EngineSpec

    try:
        spec = EngineSpec.parse(engine)
    except ValueError as exc:
        raise UsageError(f"--engine: {exc}") from None
    wanted = list(dict.fromkeys(images)) or [DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE]
    push_images(spec, wanted, out=sys.stdout)
    return 0
