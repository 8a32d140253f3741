"""`fks image build --from IMAGE`: the agent layer on a user's image, tagged by its inputs."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fks_testing.helpers import fks, git, init_repo

from sandbox_runner import __version__, docker_daemon
from sandbox_runner import labels as fks_labels
from sandbox_runner.images import build, derived, lookup, versions

# The toolchain image and the agent layer on it are built once, on one xdist worker.
pytestmark = pytest.mark.xdist_group("derived")

CA_DIR = Path("/usr/local/share/ca-certificates")


def ca_args() -> list[str]:
    """The machine's extra CAs (a TLS-intercepting proxy's), as scripts/build-images passes them."""
    return [arg for cert in sorted(CA_DIR.glob("*.crt")) for arg in ("--ca-cert", str(cert))]


def docker_build(tag: str, dockerfile: str) -> None:
    built = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]


def remove_images(*tags: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, check=False)


def local_base() -> str:
    """The Debian base the agent image was built from (the locally made one without a registry)."""
    labels = docker_daemon.docker_client().images.get(lookup.DEFAULT_AGENT_IMAGE).labels
    return labels["org.opencontainers.image.base.name"]


# --- inputs and tags ---------------------------------------------------------------------------


def test_the_tag_names_the_base_and_the_inputs() -> None:
    digest = "0123456789abcdef" * 4
    assert derived.derived_tag("registry:5000/Team/GCC:13", digest) == (
        "fks-agent:from-registry-5000-team-gcc-13-0123456789ab"
    )
    assert derived.derived_tag("___", digest) == "fks-agent:from-___-0123456789ab"


def test_every_input_changes_the_hash(tmp_path: Path) -> None:
    context = build.assemble_context(
        tmp_path / "ctx", ca_certs=[], dockerfile=derived.LAYER_DOCKERFILE_NAME
    )
    assert (context / "Dockerfile.layer").is_file()
    first = derived.inputs_hash(context, base_id="sha256:a", claude_version="2.0.0")
    assert derived.inputs_hash(context, base_id="sha256:a", claude_version="2.0.0") == first
    assert derived.inputs_hash(context, base_id="sha256:b", claude_version="2.0.0") != first
    assert derived.inputs_hash(context, base_id="sha256:a", claude_version="2.0.1") != first
    (context / "fks" / "sandbox_runner" / "errors.py").write_text("# edited\n", encoding="utf-8")
    assert derived.inputs_hash(context, base_id="sha256:a", claude_version="2.0.0") != first


def test_a_stale_derived_image_is_rebuilt_with_from() -> None:
    labels = {"fks.version": "0.0.1", fks_labels.LABEL_FROM: "gcc:13"}
    client = SimpleNamespace(
        images=SimpleNamespace(get=lambda _name: SimpleNamespace(labels=labels))
    )
    warning = lookup.stale_image_warning(client, "fks-agent:from-gcc-13-0123456789ab")
    assert warning == (
        f"image fks-agent:from-gcc-13-0123456789ab holds fks 0.0.1 (this is {__version__}) and "
        f"Claude Code of unknown version (expected {versions.CLAUDE_CODE_VERSION}); "
        "rebuild it with 'fks image build --from gcc:13'"
    )


def test_from_and_base_image_together_is_a_usage_error() -> None:
    res = fks("image", "build", "--from", "a:1", "--base-image", "b:1")
    assert res.code == 2
    assert res.stderr.splitlines() == [
        "fks: --from and --base-image cannot be used together: --from puts the agent layer on "
        "your image, --base-image chooses the base of the default one"
    ]


@pytest.mark.docker
def test_from_an_image_that_cannot_be_had_is_one_line() -> None:
    res = fks("image", "build", "--from", "fks-test-no-such-image:1")
    assert res.code == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith(
        "fks: --from image 'fks-test-no-such-image:1' is not available locally and cannot pull"
    )
    assert line.endswith("; build or pull it first")


@pytest.mark.docker
def test_an_alpine_base_fails_with_one_clear_line() -> None:
    tag = f"fks-test-alpine-lookalike:{uuid.uuid4().hex[:8]}"
    docker_build(tag, f"FROM {local_base()}\nRUN echo 3.20.0 > /etc/alpine-release\n")
    try:
        res = fks("image", "build", "--from", tag, *ca_args(), timeout=300)
    finally:
        remove_images(tag)
    assert res.code == 2, res.output[-2000:]
    assert res.stderr.splitlines() == [
        f"fks: {tag} is Alpine (musl); --from needs a Debian or Ubuntu based image"
    ]


# --- a toolchain image, the agent layer on it, and an agent that builds C ---------------------


@pytest.fixture(scope="module")
def toolchain() -> Iterator[str]:
    """A Debian base plus make and gcc (apt goes out through the proxy, as users' builds do)."""
    tag = f"fks-test-toolchain:{uuid.uuid4().hex[:8]}"
    docker_build(
        tag,
        f"FROM {local_base()}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make"
        " && rm -rf /var/lib/apt/lists/*\n",
    )
    try:
        yield tag
    finally:
        remove_images(tag)


@pytest.fixture(scope="module")
def derived_image(toolchain: str) -> Iterator[str]:
    res = fks("image", "build", "--from", toolchain, *ca_args(), timeout=900)
    assert res.code == 0, res.output[-3000:]
    (tag,) = [
        line.removeprefix("Use it with: fks run --sandbox --image ")
        for line in res.stdout.splitlines()
        if line.startswith("Use it with:")
    ]
    try:
        yield tag
    finally:
        remove_images(tag)


@pytest.mark.docker
@pytest.mark.timeout(900)  # the first one builds both images, as their fixtures allow
def test_the_derived_image_is_labelled_and_a_second_build_is_a_no_op(
    toolchain: str, derived_image: str
) -> None:
    client = docker_daemon.docker_client()
    image = client.images.get(derived_image)
    assert derived_image.startswith("fks-agent:from-fks-test-toolchain-")
    assert image.labels[fks_labels.LABEL_FROM] == toolchain
    assert image.labels[fks_labels.LABEL_FROM_ID] == client.images.get(toolchain).id
    assert image.labels[fks_labels.LABEL_CLAUDE_VERSION] == versions.CLAUDE_CODE_VERSION
    assert image.labels[fks_labels.LABEL_FKS_VERSION] == __version__

    again = fks("image", "build", "--from", toolchain, *ca_args(), timeout=300)
    assert again.code == 0, again.output[-2000:]
    assert f"{derived_image} is up to date (its inputs have not changed)" in again.stdout
    assert "Step " not in again.stdout  # nothing was built
    assert client.images.get(derived_image).id == image.id


@pytest.mark.docker
@pytest.mark.timeout(900)  # the first one builds both images, as their fixtures allow
def test_an_agent_builds_and_runs_a_c_program_in_the_derived_image(
    derived_image: str, tmp_path: Path
) -> None:
    agent = (
        "#!/bin/sh\nset -e\n"
        "printf '#include <stdio.h>\\nint main(void) { puts(\"hello from C\"); return 0; }\\n'"
        " > hello.c\n"
        "printf 'hello: hello.c\\n\\tcc -O2 -o hello hello.c\\n' > Makefile\n"
        "make\n./hello > out.txt\nprintf 'hello\\n' > .gitignore\n"
        "git add hello.c Makefile out.txt .gitignore\ngit commit -qm 'Build and run hello'\n"
        "echo FORKHESTRA_COMPLETE\n"
    )
    repo = init_repo(tmp_path / "repo", {"agent.sh": agent})
    (repo / "agent.sh").chmod(0o755)
    git(repo, "commit", "-qam", "executable")
    res = fks("run", "./agent.sh:2", "--sandbox", "--image", derived_image, cwd=repo, timeout=300)
    assert res.code == 0, res.output[-3000:]
    assert "cc -O2 -o hello hello.c" in res.output
    assert (repo / "out.txt").read_text() == "hello from C\n"
    assert git(repo, "log", "-1", "--format=%s") == "Build and run hello"
    assert not (repo / "hello").exists()  # the binary stayed in the container
    assert os.environ.get("FKS_AGENT_IMAGE", "") != derived_image
