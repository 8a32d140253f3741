"""`fks image build --from IMAGE`: the agent layer (layer/Dockerfile) on top of a user's image,
tagged by a hash of everything that goes into it, so an unchanged build is a no-op."""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sandbox_runner import __version__
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.build import assemble_context, build_context
from sandbox_runner.images.lookup import image_exists, pull_image, split_tag
from sandbox_runner.images.versions import image_labels, npm_registry
from sandbox_runner.labels import LABEL_FROM, LABEL_FROM_ID, LABEL_INPUTS

if TYPE_CHECKING:
    from collections.abc import Sequence

    import docker

LAYER_DOCKERFILE_NAME = "Dockerfile.layer"
DERIVED_REPOSITORY = "fks-agent"


def derived_tag(base: str, inputs_hash: str) -> str:
    """fks-agent:from-<readable base>-<12 hex digits of the inputs' hash>."""
    slug = re.sub(r"[^a-z0-9_.-]+", "-", base.lower()).strip("-.")[:40] or "image"
    return f"{DERIVED_REPOSITORY}:from-{slug}-{inputs_hash[:12]}"


def inputs_hash(context: Path, *, base_id: str, claude_version: str) -> str:
    """sha256 of the base image id, the versions and every file of the build context."""
    digest = hashlib.sha256()
    for part in (base_id, claude_version, __version__, npm_registry()):
        digest.update(part.encode() + b"\0")
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _base_id(client: docker.DockerClient, base: str, say: TextIO) -> str:
    if not image_exists(client, base):
        print(f"{base} is not here: pulling it", file=say, flush=True)
        try:
            pull_image(client, base)
        except SandboxError as exc:
            raise SandboxError(
                f"--from image {base!r} is not available locally and {exc}; build or pull it first"
            ) from None
    image_id: str = client.images.get(base).id
    return image_id


def build_derived_image(
    base: str,
    *,
    ca_certs: Sequence[Path],
    claude_version: str,
    tag: str | None = None,
    out: TextIO | None = None,
    say_use: bool = True,
) -> str:
    """Build (or find, when nothing changed) the agent layer on `base`; return its tag."""
    stream = out if out is not None else sys.stdout
    with tempfile.TemporaryDirectory(prefix="fks-layer-") as tmp:
        context = assemble_context(
            Path(tmp) / "layer", ca_certs=ca_certs, dockerfile=LAYER_DOCKERFILE_NAME
        )
        client = docker_client()
        base_id = _base_id(client, base, stream)
        digest = inputs_hash(context, base_id=base_id, claude_version=claude_version)
        derived = derived_tag(base, digest)
        print(f"Claude Code {claude_version}, fks {__version__}, on {base}", file=stream)
        if image_exists(client, derived):
            print(f"{derived} is up to date (its inputs have not changed)", file=stream)
        else:
            labels = {
                **image_labels(claude_version),
                LABEL_FROM: base,
                LABEL_FROM_ID: base_id,
                LABEL_INPUTS: digest,
            }
            build_context(
                client,
                context,
                base_image=base,
                tag=derived,
                out=stream,
                buildargs={"CLAUDE_CODE_VERSION": claude_version, "NPM_REGISTRY": npm_registry()},
                labels=labels,
                dockerfile=LAYER_DOCKERFILE_NAME,
            )
    if tag:
        repository, version = split_tag(tag)
        client.images.get(derived).tag(repository, version)
    final = tag or derived
    if say_use:
        print(f"Use it with: fks run --sandbox --image {final}", file=stream, flush=True)
    return final
