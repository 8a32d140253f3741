"""`fks image push --engine URL` against a real second engine (testing/fks_testing/engines.py): the image
arrives with the same id through the API (no registry), streamed, and runs there; a second push
sends nothing; a copy under another tag is only tagged."""

from __future__ import annotations

import re
import subprocess
import tracemalloc
from typing import Any

import pytest
from fks_testing.helpers import fks

pytestmark = pytest.mark.docker

IMAGE = "fks-agent:latest"


def local_id(name: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", name, "--format", "{{.Id}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def remote_id(engine: Any, name: str) -> str | None:
    done = engine.docker("image", "inspect", name, "--format", "{{.Id}}", check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def absent(engine: Any, name: str) -> None:
    """The image this engine has under `name` is not on `engine` (an earlier test of the
    session, a remote run, may have sent it): removed there under every tag."""
    engine.docker("rmi", "--force", local_id(name), check=False)
    assert remote_id(engine, name) is None


def test_push_sends_the_image_once_streamed_and_it_runs_there(second_engine: Any, cli: Any) -> None:
    image_id = local_id(IMAGE)
    absent(second_engine, IMAGE)
    size = int(
        subprocess.run(
            ["docker", "image", "inspect", IMAGE, "--format", "{{.Size}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert remote_id(second_engine, IMAGE) is None
    tracemalloc.start()
    try:
        first = cli("image", "push", "--engine", second_engine.url, "--image", IMAGE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first.code == 0, first.output
    assert re.fullmatch(
        rf"pushed {IMAGE} \({image_id[7:19]}, \d+ MB\) to {second_engine.url} in [\d.]+ s\n",
        first.stdout,
    ), first.stdout
    # Streamed: the archive (about the image's size) never sat in this process's memory.
    assert size > 200e6 and peak < 64e6, (size, peak)
    assert remote_id(second_engine, IMAGE) == image_id

    again = cli("image", "push", "--engine", second_engine.url, "--image", IMAGE)
    assert again.code == 0, again.output
    assert again.stdout == (
        f"{IMAGE} ({image_id[7:19]}) is on {second_engine.url} already; nothing sent\n"
    )
    ran = second_engine.docker("run", "--rm", "--network", "none", IMAGE, "true", check=False)
    assert ran.returncode == 0, ran.stderr


def test_an_image_there_under_another_tag_is_only_tagged(second_engine: Any) -> None:
    """Identity is the image id: the same image under another name is not sent again."""
    image_id = local_id(IMAGE)
    if remote_id(second_engine, IMAGE) is None:  # this test alone: bring it there first
        assert fks("image", "push", "--engine", second_engine.url, "--image", IMAGE).code == 0
    second_engine.docker("tag", IMAGE, "fkse-elsewhere:1")
    second_engine.docker("rmi", IMAGE)  # only the tag goes: fkse-elsewhere:1 keeps the image
    assert remote_id(second_engine, IMAGE) is None

    done = fks("image", "push", "--engine", second_engine.url, "--image", IMAGE)
    assert done.code == 0, done.output
    assert done.stdout == (
        f"{IMAGE} ({image_id[7:19]}) was on {second_engine.url} already; tagged it {IMAGE}\n"
    )
    assert remote_id(second_engine, IMAGE) == image_id


def test_a_tag_there_naming_another_image_is_replaced(second_engine: Any) -> None:
    """A same-named image with another id there is not ours: the real one is sent."""
    proxy = "fks-proxy:latest"
    absent(second_engine, proxy)
    if remote_id(second_engine, IMAGE) is None:  # this test alone: bring it there first
        assert fks("image", "push", "--engine", second_engine.url, "--image", IMAGE).code == 0
    second_engine.docker("tag", IMAGE, proxy)  # a decoy: the proxy's name on the agent image
    assert remote_id(second_engine, proxy) != local_id(proxy)

    done = fks("image", "push", "--engine", second_engine.url, "--image", proxy)
    assert done.code == 0, done.output
    assert done.stdout.startswith(f"pushed {proxy} ({local_id(proxy)[7:19]}, ")
    assert remote_id(second_engine, proxy) == local_id(proxy)


@pytest.mark.xdist_group("swarm")  # not while the swarm's tests make it a manager
def test_push_usage_errors_are_one_line(second_engine: Any) -> None:
    for args, line in [
        (["--engine", "bogus"], "fks: --engine: 'bogus' is not one of: local, tcp://HOST:PORT"),
        (
            ["--engine", second_engine.url, "--image", "fkse-missing:1"],
            "fks: Image 'fkse-missing:1' not found; check the name with 'docker images', or "
            "build fks's agent image under it with 'fks image build --tag fkse-missing:1'",
        ),
        (
            ["--engine", "swarm"],
            "fks: fks image push --engine swarm: the local Docker engine is not a swarm manager",
        ),
        (["--engine", "local", "--image", IMAGE], None),
    ]:
        done = fks("image", "push", *args)
        # A plain-TCP engine is warned about first (tests/backends/docker/engine/test_connect.py).
        done.stderr = "".join(
            x for x in done.stderr.splitlines(keepends=True) if "plain TCP without TLS" not in x
        )
        if line is None:
            assert done.code == 0 and done.stdout == (
                f"{IMAGE} is on the local engine already; nothing to do\n"
            )
            continue
        assert done.code == 2, done.output
        assert done.stderr.startswith(line) and done.stderr.count("\n") == 1, done.stderr
