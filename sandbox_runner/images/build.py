"""Building the images fks makes from its own Dockerfiles, the agent's (`agent/Dockerfile`) and
the egress proxy's (`proxy/Dockerfile`), and the build contexts `--from` reuses for the agent
layer (`layer/Dockerfile`): contexts, the base they are built from, the build's output."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sandbox_runner import __version__
from sandbox_runner.docker_daemon import docker_client, one_line, root_cause
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.base_image import make_base_image, resolve_base_image
from sandbox_runner.images.build_output import BuildTrace, build_lines, isatty
from sandbox_runner.images.clis import clis_label, with_clis
from sandbox_runner.images.lookup import (
    DEFAULT_AGENT_IMAGE,
    DEFAULT_PROXY_IMAGE,
    image_exists,
    pull_image,
    split_tag,
)
from sandbox_runner.images.versions import CLAUDE_CODE_VERSION, image_labels, npm_registry

if TYPE_CHECKING:
    import docker

# A Dockerfile's name in a build context; `Dockerfile.X` is the package's `images/X/Dockerfile`.
DOCKERFILE_NAME = "Dockerfile.agent"
PROXY_DOCKERFILE_NAME = "Dockerfile.proxy"

PACKAGE_DIR = Path(__file__).resolve().parents[1]
BUILD_HELPER = Path(__file__).resolve().with_name("build_helper.py")  # runs in the build
# Only the host drives Docker; inside the image fks runs forge-tasks (and `fks --version`).
HOST_ONLY_PACKAGES = frozenset({"docker", "tenacity", "apprise", "httpx"})
"""fks's dependencies no code run in a container imports (the engine, retries, notifications,
pull requests): not installed in the images."""

# One silent build step (npm fetching the ~200 MB CLI binary) may take this long.
BUILD_READ_TIMEOUT_S = 1800


# --- Build context -------------------------------------------------------------------------


def assemble_context(
    dest: Path,
    *,
    ca_certs: Sequence[Path],
    package_dir: Path = PACKAGE_DIR,
    dockerfile: str = DOCKERFILE_NAME,
    clis: Sequence[str] = (),
) -> Path:
    """Write the agent's build context into `dest`: Dockerfile.agent (or `dockerfile`) with the
    stages of the agent CLIs `clis`, build_helper.py, ca-certs/, fks/ (see the Dockerfile)."""
    _dockerfile_and_certs(dest, dockerfile, ca_certs=ca_certs, package_dir=package_dir)
    if dockerfile == DOCKERFILE_NAME:
        (dest / dockerfile).write_text(with_clis((dest / dockerfile).read_text(), clis))
    shutil.copyfile(package_dir / "images" / BUILD_HELPER.name, dest / BUILD_HELPER.name)
    requirements, project = _project_files()
    source = dest / "fks"
    shutil.copytree(
        package_dir,
        source / "sandbox_runner",
        ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"),
    )
    (source / "requirements.txt").write_text(requirements)
    (source / "pyproject.toml").write_text(project)
    return dest


def assemble_proxy_context(
    dest: Path, *, ca_certs: Sequence[Path], package_dir: Path = PACKAGE_DIR
) -> Path:
    """Write the proxy's build context into `dest`: Dockerfile.proxy and ca-certs/."""
    _dockerfile_and_certs(dest, PROXY_DOCKERFILE_NAME, ca_certs=ca_certs, package_dir=package_dir)
    return dest


def dockerfile_source(name: str, *, package_dir: Path = PACKAGE_DIR) -> Path:
    """The package's file behind the context's Dockerfile `name` (`Dockerfile.agent` is
    `images/agent/Dockerfile`)."""
    return package_dir / "images" / name.removeprefix("Dockerfile.") / "Dockerfile"


def _dockerfile_and_certs(
    dest: Path, name: str, *, ca_certs: Sequence[Path], package_dir: Path
) -> None:
    certs = [_checked_cert(path) for path in ca_certs]
    dockerfile = dockerfile_source(name, package_dir=package_dir)
    if not dockerfile.is_file():
        raise SandboxError(f"{dockerfile} is missing; reinstall fks (it ships the Dockerfile)")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dockerfile, dest / name)

    cert_dir = dest / "ca-certs"
    cert_dir.mkdir()
    used: set[str] = set()
    for cert in certs:
        shutil.copyfile(cert, cert_dir / _unique_crt_name(cert, used))


def _checked_cert(path: Path) -> Path:
    if not path.is_file():
        raise SandboxError(
            f"CA certificate {path} not found; pass an existing PEM file to --ca-cert"
        )
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise SandboxError(f"CA certificate {path} cannot be read ({exc.strerror})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise SandboxError(
            f"CA certificate {path} is not a PEM certificate (no '-----BEGIN CERTIFICATE-----'); "
            "convert it with 'openssl x509 -in FILE -out FILE.crt'"
        )
    return path


def _unique_crt_name(cert: Path, used: set[str]) -> str:
    """update-ca-certificates only reads *.crt; keep names readable and distinct."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", cert.stem) or "ca"
    name, n = f"{stem}.crt", 1
    while name in used:
        n += 1
        name = f"{stem}-{n}.crt"
    used.add(name)
    return name


def _project_files() -> tuple[str, str]:
    """requirements.txt and a minimal pyproject.toml for the fks that is running.

    Taken from the installed distribution's metadata, so a checkout (editable install) and a
    wheel install give the same context.
    """
    try:
        dist = importlib.metadata.distribution("fks")
    except importlib.metadata.PackageNotFoundError:
        raise SandboxError(
            "fks is not installed as a package (no 'fks' metadata); install it with "
            "'pip install -e .' in the checkout"
        ) from None
    dependencies = [req for req in dist.requires or [] if not re.search(r"\bextra\s*==", req)]
    in_image = [req for req in dependencies if _requirement_name(req) not in HOST_ONLY_PACKAGES]
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    # setuptools/wheel: the image installs fks with --no-build-isolation (no PyPI at that step).
    requirements = "\n".join([*in_image, "setuptools>=68", "wheel"]) + "\n"
    lines = [
        "[build-system]",
        'requires = ["setuptools>=68"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        'name = "fks"',
        f"version = {json.dumps(dist.version)}",
        f"requires-python = {json.dumps(str(dist.metadata.json.get('requires_python', '>=3.11')))}",
        f"dependencies = {json.dumps(dependencies)}",
        "",
        "[project.scripts]",
        *(f"{json.dumps(name)} = {json.dumps(value)}" for name, value in sorted(scripts.items())),
        "",
        "[tool.setuptools.packages.find]",
        'include = ["sandbox_runner*"]',
        "",
        "[tool.setuptools.package-data]",
        'sandbox_runner = ["**/*"]',
        "",
    ]
    return requirements, "\n".join(lines)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower()


# --- Build -----------------------------------------------------------------------------------


def build_agent_image(
    *,
    base_image: str | None,
    ca_certs: Sequence[Path],
    claude_version: str = CLAUDE_CODE_VERSION,
    tag: str = DEFAULT_AGENT_IMAGE,
    proxy_tag: str = DEFAULT_PROXY_IMAGE,
    out: TextIO | None = None,
    clis: Sequence[str] = (),
) -> str:
    """Build the egress proxy image, then the agent image with Claude Code `claude_version`
    and the agent CLIs `clis`, from one base; return the agent image's id. Build output is
    streamed to `out` line by line."""
    stream = out if out is not None else sys.stdout
    with tempfile.TemporaryDirectory(prefix="fks-image-") as tmp:
        agent_context = assemble_context(Path(tmp) / "agent", ca_certs=ca_certs, clis=clis)
        proxy_context = assemble_proxy_context(Path(tmp) / "proxy", ca_certs=ca_certs)
        print(_what_goes_in(claude_version, clis), file=stream, flush=True)
        client = docker_client()
        base = resolve_base_image(
            base_image,
            is_present=lambda name: image_exists(client, name),
            pull=lambda name: pull_image(client, name),
            make_local_base=make_base_image,
            say=lambda line: print(line, file=stream, flush=True),
        )
        proxy_id = build_image(
            client,
            proxy_context,
            base_image=base,
            tag=proxy_tag,
            out=stream,
            dockerfile=PROXY_DOCKERFILE_NAME,
        )
        try:
            agent_id = build_image(
                client,
                agent_context,
                base_image=base,
                tag=tag,
                out=stream,
                buildargs={"CLAUDE_CODE_VERSION": claude_version, "NPM_REGISTRY": npm_registry()},
                labels={**image_labels(claude_version), **clis_label(clis)},
            )
        except BaseException:
            discard_image(client, proxy_id)
            raise
        # Only now that both are built does either tag move.
        tag_image(client, proxy_id, proxy_tag)
        return tag_image(client, agent_id, tag)


def _what_goes_in(claude_version: str, clis: Sequence[str]) -> str:
    pinned = " (pinned by this fks)" if claude_version == CLAUDE_CODE_VERSION else ""
    also = f", {', '.join(clis)}" if clis else ""
    return f"Claude Code {claude_version}{pinned}{also}, fks {__version__}"


def build_context(
    client: docker.DockerClient,
    context: Path,
    *,
    base_image: str,
    tag: str,
    out: TextIO,
    buildargs: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    dockerfile: str = DOCKERFILE_NAME,
    no_cache: bool = False,
) -> str:
    """`docker build` an assembled context and tag it `tag`; SandboxError when a step fails
    (no tag moved, nothing the build made left behind)."""
    image_id = build_image(
        client,
        context,
        base_image=base_image,
        tag=tag,
        out=out,
        buildargs=buildargs,
        labels=labels,
        dockerfile=dockerfile,
        no_cache=no_cache,
    )
    return tag_image(client, image_id, tag)


def build_image(
    client: docker.DockerClient,
    context: Path,
    *,
    base_image: str,
    tag: str,
    out: TextIO,
    buildargs: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    dockerfile: str = DOCKERFILE_NAME,
    no_cache: bool = False,
) -> str:
    """`docker build` an assembled context, untagged (`tag` is what it is for); its image id.
    A failed (or interrupted) build removes the images its steps made."""
    started = time.monotonic()
    print(f"building {tag} from {base_image}", file=out, flush=True)
    trace = BuildTrace()
    try:
        events = client.api.build(
            path=str(context),
            dockerfile=dockerfile,
            buildargs={"BASE_IMAGE": base_image, **(buildargs or {})},
            labels=labels,
            nocache=no_cache,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            timeout=BUILD_READ_TIMEOUT_S,
        )
        for line in build_lines(events, plain=not isatty(out), trace=trace):
            print(line, file=out, flush=True)
        if trace.image is None:
            raise SandboxError("docker build failed: its output named no image")
        image = client.images.get(trace.image)
    except BaseException as exc:
        for image_id in reversed(trace.made):
            discard_image(client, image_id)
        if (failed := _build_failure(exc)) is not None:
            raise failed from None
        raise
    size_mb = image.attrs.get("Size", 0) / 1e6
    print(
        f"built {tag} ({str(image.id)[7:19]}, {size_mb:.0f} MB) in "
        f"{time.monotonic() - started:.0f} s",
        file=out,
        flush=True,
    )
    return str(image.id)


def _build_failure(exc: BaseException) -> SandboxError | None:
    """What a failed build says to the user (None: an error to pass on as it is)."""
    import docker

    if isinstance(exc, docker.errors.APIError):
        return SandboxError(f"docker build failed: {one_line(exc.explanation or exc)}")
    if isinstance(exc, (docker.errors.DockerException, OSError)):  # a stalled step, a dying daemon
        return SandboxError(f"docker build failed: {one_line(root_cause(exc))}")
    return None


def tag_image(client: docker.DockerClient, image_id: str, name: str) -> str:
    """Give the image `image_id` the name `name` (moved from any image that had it)."""
    repository, version = split_tag(name)
    client.api.tag(image_id, repository, version, force=True)
    return image_id


def discard_image(client: docker.DockerClient, image_id: str) -> None:
    """Remove an image a build made, with the untagged parents only it used, unless it is
    tagged (a build that came out the same as an image someone has) or in use."""
    import docker

    try:
        if client.images.get(image_id).tags:
            return
        client.api.remove_image(image_id)
    except docker.errors.DockerException:
        pass  # gone already, or a container or another image uses it: it is not ours alone
