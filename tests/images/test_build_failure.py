"""A build that fails (here: a step that does not trust a TLS certificate, as behind a
TLS-intercepting proxy without --ca-cert) says so in one line naming --ca-cert, moves no tag
and leaves none of the images it made; a build that succeeds moves its tags only at the end.
Each builds a few small throwaway images from the local base, never the shared ones."""

from __future__ import annotations

import io
import json
import re
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks, init_repo

from sandbox_runner import docker_daemon
from sandbox_runner.errors import SandboxError
from sandbox_runner.images import build, devcontainer, lookup

pytestmark = pytest.mark.docker

UNTRUSTED = "curl: (60) SSL certificate problem: self-signed certificate in certificate chain"
FAILING = f'RUN echo "{UNTRUSTED}" >&2; exit 60\n'


@pytest.fixture
def base() -> str:
    """The base the shared agent image was built from (the local one on a machine without a
    registry)."""
    client = docker_daemon.docker_client()
    labels = client.images.get(lookup.DEFAULT_AGENT_IMAGE).labels
    return str(labels["org.opencontainers.image.base.name"])


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Image names a test makes; removed afterwards (only the names: never the base)."""
    made: list[str] = []
    yield made
    for name in made:
        subprocess.run(["docker", "rmi", name], capture_output=True, check=False)


def _image_id(name: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _made_by_steps(output: str) -> list[str]:
    """The images the build's run steps made, as its output names them."""
    return re.findall(r"Removing intermediate container \w+\n ---> ([0-9a-f]{12})", output)


def _pre_tag(image: str, name: str, names: list[str]) -> str:
    """Give `image` the name `name` (as an earlier build would have); the image's id."""
    subprocess.run(["docker", "tag", image, name], check=True)
    names.append(name)
    found = _image_id(name)
    assert found is not None
    return found


def test_a_failing_devcontainer_build_names_ca_cert_and_leaves_nothing(
    tmp_path: Path, base: str, names: list[str]
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hi\n"})
    folder = repo / ".devcontainer"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"ARG BASE\nFROM ${{BASE}}\nRUN echo {uuid.uuid4()} > /made-by-this-build\n{FAILING}"
    )
    config = folder / "devcontainer.json"
    config.write_text(json.dumps({"build": {"dockerfile": "Dockerfile", "args": {"BASE": base}}}))
    tag = f"fks-devcontainer:{devcontainer._slug(config)}"
    before = _pre_tag(base, tag, names)

    res = fks("image", "build", "--devcontainer", str(repo), timeout=300)
    assert res.code == 2, res.output[-3000:]
    assert "Traceback" not in res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"fks: docker build failed: {UNTRUSTED}: a TLS certificate was not ")
    assert "--ca-cert FILE" in line
    assert _image_id(tag) == before  # the tag did not move
    made = _made_by_steps(res.stdout)
    assert made, res.stdout
    assert [image for image in made if _image_id(image)] == []  # nothing dangles


def _tiny_contexts(monkeypatch: pytest.MonkeyPatch, agent_steps: str) -> None:
    """The proxy's and the agent's contexts as one-step Dockerfiles of the same shape."""

    def context(name: str, steps: str) -> Any:
        def assemble(dest: Path, *, ca_certs: Sequence[Path], **_: object) -> Path:
            dest.mkdir(parents=True)
            dockerfile = f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\n{steps}"
            (dest / name).write_text(dockerfile)
            return dest

        return assemble

    unique = f"RUN echo {uuid.uuid4()} > /made\n"
    monkeypatch.setattr(build, "assemble_proxy_context", context("Dockerfile.proxy", unique))
    monkeypatch.setattr(
        build, "assemble_context", context("Dockerfile.agent", unique + agent_steps)
    )
    monkeypatch.setattr(build, "image_labels", lambda _version: {})


def test_a_failing_agent_build_moves_not_the_proxys_tag_and_removes_the_proxy_it_built(
    monkeypatch: pytest.MonkeyPatch, base: str, names: list[str]
) -> None:
    _tiny_contexts(monkeypatch, FAILING)
    proxy_tag = f"fks-test-proxy:{uuid.uuid4().hex[:12]}"
    agent_tag = f"fks-test-agent:{uuid.uuid4().hex[:12]}"
    names.append(agent_tag)
    before = _pre_tag(base, proxy_tag, names)
    out = io.StringIO()
    with pytest.raises(SandboxError) as caught:
        build.build_agent_image(
            base_image=base, ca_certs=[], tag=agent_tag, proxy_tag=proxy_tag, out=out
        )
    assert "--ca-cert FILE" in str(caught.value) and "\n" not in str(caught.value)
    assert _image_id(proxy_tag) == before
    assert _image_id(agent_tag) is None
    (proxy_built,) = re.findall(rf"built {re.escape(proxy_tag)} \(([0-9a-f]{{12}})", out.getvalue())
    made = [proxy_built, *_made_by_steps(out.getvalue())]
    assert [image for image in made if _image_id(image)] == []


def test_a_build_that_succeeds_tags_both_images_at_the_end(
    monkeypatch: pytest.MonkeyPatch, base: str, names: list[str]
) -> None:
    _tiny_contexts(monkeypatch, "RUN true\n")
    proxy_tag = f"fks-test-proxy:{uuid.uuid4().hex[:12]}"
    agent_tag = f"fks-test-agent:{uuid.uuid4().hex[:12]}"
    names.extend([agent_tag, proxy_tag])
    image_id = build.build_agent_image(
        base_image=base, ca_certs=[], tag=agent_tag, proxy_tag=proxy_tag, out=io.StringIO()
    )
    assert _image_id(agent_tag) == image_id
    assert _image_id(proxy_tag) not in (None, image_id)
