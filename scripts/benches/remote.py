"""Benchmarks on a second Docker engine reached over TCP (started here, as the tests do)."""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benches.common import (
    FKS,
    IMAGE,
    NOOP_CONFIG,
    big_repo,
    fks,
    make_repo,
    median_many,
    sh,
)
from benches.workspace import Iterations

if TYPE_CHECKING:
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace


def bench_remote(work: Path, repeat: int) -> list[str]:
    """On a second engine that cannot see this machine's disk (testing/fks_testing/engines.py: a dockerd in
    a network namespace of its own, reached over TCP), its images sent first."""
    from fks_testing.engines import SecondEngine

    with SecondEngine() as engine:
        distribution = _image_distribution(repeat, engine.url)
        sh(FKS, "image", "push", "--engine", engine.url)
        return (
            _remote_iterations(work, repeat, engine.url)
            + _remote_shipping(work, repeat, engine.client())
            + distribution
        )


def _image_distribution(repeat: int, url: str) -> list[str]:
    """fks's images onto an engine that has none (as a fresh swarm node gets them before a task
    is placed there): `fks image push --engine URL` against `docker save … | docker -H URL
    load` of the same images, each after the images were removed there, in turn."""
    images = [IMAGE, "fks-proxy:latest"]

    def emptied() -> None:
        subprocess.run(["docker", "-H", url, "image", "rm", "-f", *images], capture_output=True)
        sh("docker", "-H", url, "image", "prune", "-af")

    def fks_push() -> None:
        emptied()
        sh(FKS, "image", "push", "--engine", url)

    def save_load() -> None:
        emptied()
        sh("sh", "-c", f"docker save {' '.join(images)} | docker -H {url} load -q")

    took_f, took_d = median_many([fks_push, save_load], repeat, warmup=1)
    ratio = took_f / took_d
    return [
        f"| remote: fks's two images onto an engine that has none (`fks image push`, as a fresh swarm node gets them) | {took_f:.1f} s | `docker save … \\| docker -H … load` {took_d:.1f} s | {ratio:.2f}x | reported | |",
    ]


def _remote_iterations(work: Path, repeat: int, url: str) -> list[str]:
    """Per iteration on the remote engine: `(T(noop:12) - T(noop:2)) / 10` against the same
    for `docker -H URL run --rm`."""
    project = make_repo(work / "remote", {**NOOP_CONFIG, "sandbox": {"network": "open"}})

    def run(n: int, bare: bool) -> Callable[[], None]:
        def bare_runs() -> None:
            for _ in range(n):
                sh("docker", "-H", url, "run", "--rm", IMAGE, "true")

        if bare:
            return bare_runs
        return functools.partial(fks, "run", f"noop:{n}", "--sandbox", "--engine", url, cwd=project)

    short_f, short_d, long_f, long_d = median_many(
        [run(n, bare) for n in (2, 12) for bare in (False, True)], repeat
    )
    per_f, per_d = (long_f - short_f) / 10, (long_d - short_d) / 10
    ratio = per_f / per_d
    return [
        f'| remote: per iteration of `fks run "noop:N" --sandbox --engine tcp://…` | {per_f * 1000:.0f} ms | `docker -H tcp://… run --rm {IMAGE} true` {per_d * 1000:.0f} ms | {ratio:.2f}x | <= 1.3x | {"ok" if ratio <= 1.3 else "MISSED"} |',
        f"| remote: fixed cost per run there (start-up, checks, the base sent, first checkout) | {(short_f - 2 * per_f) * 1000:.0f} ms | - | - | reported | |",
    ]


def _remote_shipping(work: Path, repeat: int, client: Any) -> list[str]:
    """The base of a 20,000-file repository into a fresh remote workspace: the pack sent and
    indexed there, then the step's full checkout (timed inside its container), against
    `git clone --no-local` of the same repository in a container there into a fresh volume
    (packing, indexing and checking out the same files; timed inside too). The engine is on
    this machine, so the clone can read the repository through a bind mount.

    Both sides write 20,000 new files, so both are kept out of one trap of the file system:
    on ext4 without a journal (these machines' root file system), creating files shortly after
    many were deleted scans past every recently freed inode (`recently_deleted()` in
    fs/ext4/ialloc.c: for 60 s, 360 s while the inode table is dirty), and 20,000 new files
    then take 5 to 15 s instead of 0.5 s. So nothing is deleted until every attempt is done,
    and the two sides take turns going first."""
    from sandbox_runner.git.repo import create_branch, rev

    repo_path = big_repo(work)
    its = Iterations(repo_path, client)
    clone_volumes: list[str] = []
    ships, checkouts, clones = [], [], []
    try:
        for attempt in range(repeat + 1):  # the first attempt warms the page cache
            ws = its.workspace(f"remote{attempt}")
            branch = f"fks/bench-remote-{attempt}/1-x"
            create_branch(its.repo, branch, rev(its.repo, "main"))

            clone_volumes.append(f"fks-bench-{os.getpid()}-clone{attempt}")
            os.sync()
            if attempt % 2:
                clone = _clone_there(its.client, repo_path, clone_volumes[-1])
                os.sync()
                ship, checkout = _ship_and_checkout(its, ws, branch)
            else:
                ship, checkout = _ship_and_checkout(its, ws, branch)
                os.sync()
                clone = _clone_there(its.client, repo_path, clone_volumes[-1])
            print(
                f"remote base, attempt {attempt}: ship {ship * 1000:.0f} ms, checkout "
                f"{checkout * 1000:.0f} ms, clone {clone * 1000:.0f} ms",
                file=sys.stderr,
            )
            if attempt:
                ships.append(ship)
                checkouts.append(checkout)
                clones.append(clone)
    finally:
        its.close()
        for volume in clone_volumes:
            with contextlib.suppress(Exception):
                its.client.volumes.get(volume).remove(force=True)
    ship, checkout, clone = (statistics.median(x) for x in (ships, checkouts, clones))
    ratio = (ship + checkout) / clone
    return [
        f"| remote: the base of a 20,000-file repository into a fresh workspace there (pack sent and indexed {ship * 1000:.0f} ms, checkout {checkout * 1000:.0f} ms) | {(ship + checkout) * 1000:.0f} ms | `git clone --no-local` of it in a container there {clone * 1000:.0f} ms | {ratio:.2f}x | <= 1.5x | {'ok' if ratio <= 1.5 else 'MISSED'} |",
    ]


def _ship_and_checkout(its: Iterations, ws: VolumeWorkspace, branch: str) -> tuple[float, float]:
    """Seconds to send and index the base, and the step's first checkout (inside)."""
    from sandbox_runner.git.repo import rev

    started = time.perf_counter()
    ws.provide(rev(its.repo, "main"))
    ship = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as scratch:
        _, parts = its.run(its.sandbox(ws, branch, Path(scratch)), ("true",))
    return ship, parts["prepare"] - parts.get("settle", 0.0)


def _clone_there(client: Any, repo_path: Path, volume: str) -> float:
    """Seconds `git clone --no-local` of `repo_path` takes in a container on `client`'s
    engine, into new volume `volume` (timed inside the container; the volume is kept)."""
    script = (
        "s=$(date +%s%N); git clone -q --no-local /src /w/clone; e=$(date +%s%N); echo $((e - s))"
    )
    out = client.containers.run(
        IMAGE,
        ["sh", "-c", script],
        volumes=[f"{repo_path}:/src:ro", f"{volume}:/w"],
        user="0:0",
        remove=True,
    )
    return int(out.decode().split()[-1]) / 1e9
