"""`fks image build` and `fks image push`: the agent image the Docker sandbox runs, built here
and made present on other engines."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.backends.docker.engine.connect import engine_client
from sandbox_runner.errors import UsageError
from sandbox_runner.images import versions
from sandbox_runner.images.build import build_agent_image
from sandbox_runner.images.clis import parse_clis
from sandbox_runner.images.derived import build_derived_image
from sandbox_runner.images.devcontainer import build_devcontainer_image
from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE
from sandbox_runner.images.push import push_images
from sandbox_runner.plan.engine import EngineSpec


@dataclass(frozen=True)
class BuildOptions:
    """`fks image build`'s: which image to build, from what."""

    base_image: str | None = None
    ca_certs: Sequence[Path] = ()
    tag: str | None = None
    claude_version: str | None = None
    from_image: str | None = None
    """Put the agent layer on this image instead."""
    devcontainer: Path | None = None
    """Build from this devcontainer.json (or the folder holding it) instead."""
    with_clis: Sequence[str] | None = None
    """`--with`: the other agent CLIs to put in (None: the project's `sandbox.imageWith`)."""
    config: Path | None = None
    """The project's config, whose `sandbox.imageWith` is the default of `--with`."""


def build(options: BuildOptions) -> int:
    _check(options)
    ca_certs, tag = list(options.ca_certs), options.tag
    clis = _clis(options)
    version = versions.resolve_claude_version(options.claude_version, ca_certs=ca_certs)
    if options.devcontainer is not None:
        build_devcontainer_image(
            options.devcontainer, ca_certs=ca_certs, claude_version=version, tag=tag
        )
        return 0
    if options.from_image is not None:
        build_derived_image(options.from_image, ca_certs=ca_certs, claude_version=version, tag=tag)
        return 0
    build_agent_image(
        base_image=options.base_image,
        ca_certs=ca_certs,
        tag=tag or DEFAULT_AGENT_IMAGE,
        claude_version=version,
        clis=clis,
    )
    return 0


def _clis(options: BuildOptions) -> tuple[str, ...]:
    """The agent CLIs to put in: `--with`'s, else the project's `sandbox.imageWith`; only the
    default image takes them for now."""
    if options.with_clis is not None:
        clis = parse_clis(options.with_clis)
    else:
        clis = parse_clis(_configured_clis(options.config), where="sandbox.imageWith")
    if clis and (options.from_image is not None or options.devcontainer is not None):
        raise UsageError(
            f"{'--from' if options.from_image is not None else '--devcontainer'} images carry "
            f"Claude Code only for now; build fks's image with {', '.join(clis)} instead "
            f"(fks image build --with {','.join(clis)})"
        )
    return clis


def _configured_clis(config: Path | None) -> tuple[str, ...]:
    """The top-level `sandbox.imageWith` of the project's config (found as `fks run` finds
    it), if there is one."""
    from sandbox_runner.paths import project_dir
    from sandbox_runner.plan.config import config_path, load_config

    cwd = project_dir(None, config=config)
    loaded = load_config(config_path(cwd, config), cwd=cwd, required=config is not None)
    sandbox = loaded.sandbox if loaded is not None else None
    return sandbox.image_with if sandbox is not None else ()


def _check(options: BuildOptions) -> None:
    """--from, --base-image and --devcontainer each choose the image's base: one of them."""
    base_image, from_image = options.base_image, options.from_image
    if from_image is not None and base_image is not None:
        raise UsageError(
            "--from and --base-image cannot be used together: --from puts the agent layer on "
            "your image, --base-image chooses the base of the default one"
        )
    if from_image is not None and not from_image.strip():
        raise UsageError("--from needs an image name (e.g. --from my-toolchain:latest)")
    if options.devcontainer is not None and (from_image is not None or base_image is not None):
        raise UsageError("--devcontainer cannot be used with --from or --base-image")


def push(*, engine: str, images: Sequence[str]) -> int:
    """Make `images` (default: the agent's and the egress proxy's) present on `engine`."""
    try:
        spec = EngineSpec.parse(engine)
    except ValueError as exc:
        raise UsageError(f"--engine: {exc}") from None
    wanted = list(dict.fromkeys(images)) or [DEFAULT_AGENT_IMAGE, DEFAULT_PROXY_IMAGE]
    push_images(spec, wanted, connect=engine_client, out=sys.stdout)
    return 0
