"""`fks image push`: make an image of the local engine present on another one, through the
two engines' APIs with no registry: `docker save` streamed into `docker load`, skipped when the
other engine already has an image with the same id.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from sandbox_runner.docker_daemon import docker_client, one_line, root_cause
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.lookup import image_exists, require_image, split_tag
from sandbox_runner.labels import LABEL_ENGINE
from sandbox_runner.plan.engine import EngineSpec

if TYPE_CHECKING:
    import docker

CHUNK_BYTES = 1 << 20
# One silent stretch of a save or load (the engine writing a large layer) may take this long.
TRANSFER_TIMEOUT_S = 1800


class Connect(Protocol):
    """Connects to the engine `spec` names (the Docker backend's `engine_client`)."""

    def __call__(self, spec: EngineSpec, *, timeout: int) -> docker.DockerClient: ...


def push_images(
    engine: EngineSpec, images: Iterable[str], *, connect: Connect, out: TextIO
) -> None:
    """Make every image in `images` present on `engine` (by id), saying what was done."""
    wanted = list(images)
    if engine.kind == "swarm" and engine.url is None:
        for name in wanted:
            require_image(docker_client(), name)
        unlabelled = push_to_swarm(docker_client(), wanted, connect=connect, out=out, quiet=False)
        if unlabelled:
            raise SandboxError(
                f"fks image push --engine swarm: fks cannot reach the engine of {unlabelled[0]} "
                f"to send it images; give its URL in a node label: 'docker node update "
                f"--label-add {LABEL_ENGINE}=ssh://USER@HOST NODE' (or a tcp:// URL with TLS)"
            )
        return
    if engine.is_local:
        for name in wanted:
            require_image(docker_client(), name)
            print(f"{name} is on the local engine already; nothing to do", file=out, flush=True)
        return
    # The remote engine first: TLS variables meant for it are its problems, named as such.
    target = connect(engine, timeout=TRANSFER_TIMEOUT_S)
    source = docker_client(timeout=TRANSFER_TIMEOUT_S)
    for name in wanted:
        require_image(source, name)
    for name in wanted:
        push_image(source, target, name, engine=engine, out=out)


def push_to_swarm(
    manager: docker.DockerClient,
    images: Iterable[str],
    *,
    connect: Connect,
    out: TextIO,
    quiet: bool = True,
) -> list[str]:
    """Make `images` (of the local engine, the swarm's manager) present on every other ready
    node of its swarm, through the engine each node's label LABEL_ENGINE names; the nodes that
    have no such label (fks cannot reach their engines), named for messages."""
    local = docker_client(timeout=TRANSFER_TIMEOUT_S)
    wanted = [name for name in images if image_exists(local, name)]
    swarm = manager.info().get("Swarm") or {}
    if not swarm.get("ControlAvailable"):
        raise SandboxError(
            "fks image push --engine swarm: the local Docker engine is not a swarm manager; "
            "run it on a manager of the swarm"
        )
    unlabelled = []
    for node in manager.nodes.list():
        attrs = node.attrs
        if node.id == swarm.get("NodeID") or (attrs.get("Status") or {}).get("State") != "ready":
            continue
        url = ((attrs.get("Spec") or {}).get("Labels") or {}).get(LABEL_ENGINE)
        hostname = (attrs.get("Description") or {}).get("Hostname") or "?"
        if not url:
            unlabelled.append(f"swarm node {node.id[:12]} ({hostname})")
            continue
        try:
            spec = EngineSpec.parse(url)
        except ValueError as exc:
            raise SandboxError(f"swarm node {node.id[:12]}: label {LABEL_ENGINE}: {exc}") from None
        target = connect(spec, timeout=TRANSFER_TIMEOUT_S)
        for name in wanted:
            push_image(local, target, name, engine=spec, out=out, quiet=quiet)
    return unlabelled


def push_image(
    source: docker.DockerClient,
    target: docker.DockerClient,
    name: str,
    *,
    engine: EngineSpec,
    out: TextIO,
    quiet: bool = False,
) -> None:
    """Send image `name` from `source` to `target` unless `target` has its id already.
    `quiet`: say only what is sent (before a run)."""
    image_id: str = source.images.get(name).id
    short = image_id.removeprefix("sha256:")[:12]
    if image_exists(target, image_id):
        if _tag_id(target, name) == image_id:
            if not quiet:
                print(
                    f"{name} ({short}) is on {engine} already; nothing sent", file=out, flush=True
                )
            return
        _tag(target, image_id, name, engine)
        if not quiet:
            print(
                f"{name} ({short}) was on {engine} already; tagged it {name}", file=out, flush=True
            )
        return
    if quiet:
        print(f"fks: sending image {name} ({short}) to engine {engine}...", file=out, flush=True)
    started = time.monotonic()
    sent = _save_into_load(source, target, name, engine)
    if _tag_id(target, name) != image_id:
        raise SandboxError(
            f"cannot push {name} to {engine}: after loading, {name} there is not image {short}"
        )
    print(
        f"pushed {name} ({short}, {sent / 1e6:.0f} MB) to {engine} in "
        f"{time.monotonic() - started:.1f} s",
        file=out,
        flush=True,
    )


def _save_into_load(
    source: docker.DockerClient, target: docker.DockerClient, name: str, engine: EngineSpec
) -> int:
    """Stream `docker save NAME` from `source` into `docker load` on `target` chunk by chunk
    (never the whole archive in memory); the number of bytes sent."""
    import docker

    counter = _Counted(source.api.get_image(name, chunk_size=CHUNK_BYTES))
    try:
        # requests sends a generator body chunk by chunk (Transfer-Encoding: chunked).
        for event in target.api.load_image(counter, quiet=True):
            _raise_for_event(event, name, engine)
    except docker.errors.APIError as exc:
        detail = one_line(exc.explanation or exc)
        raise SandboxError(f"cannot push {name} to {engine}: {detail}") from None
    except (docker.errors.DockerException, OSError) as exc:
        raise SandboxError(f"cannot push {name} to {engine}: {one_line(root_cause(exc))}") from None
    return counter.sent


def _raise_for_event(event: dict[str, Any], name: str, engine: EngineSpec) -> None:
    error = event.get("error") or (event.get("errorDetail") or {}).get("message")
    if error:
        raise SandboxError(f"cannot push {name} to {engine}: {one_line(str(error))}")


class _Counted:
    """An iterable of byte chunks that counts what passes through it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.sent += len(chunk)
            yield chunk


def _tag_id(client: docker.DockerClient, name: str) -> str | None:
    """The id of the image `name` names on `client`'s engine, None when it names none."""
    import docker

    try:
        image_id: str = client.images.get(name).id
    except docker.errors.ImageNotFound:
        return None
    return image_id


def _tag(client: docker.DockerClient, image_id: str, name: str, engine: EngineSpec) -> None:
    import docker

    repository, tag = split_tag(name)
    try:
        client.api.tag(image_id, repository, tag, force=True)
    except docker.errors.APIError as exc:
        detail = one_line(exc.explanation or exc)
        raise SandboxError(f"cannot tag {name} on {engine}: {detail}") from None
