"""Benchmarks of `fks run --sandbox` against plain `docker run`: iterations, the egress
proxy, the exit, an agent's output, and the agent image."""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benches.common import (
    ENV,
    FKS,
    IMAGE,
    NOOP_CONFIG,
    big_repo,
    fks,
    make_repo,
    median_many,
    median_pair,
    sh,
    sh_out,
    timed,
)


def bench_sandbox(work: Path, repeat: int) -> list[str]:
    """Per iteration: runs of 2 and 12 iterations, so fks's fixed per-run costs (start-up,
    preflight, the workspace's first checkout) cancel out; those are reported beside it.
    With warm containers (the default: the next iterations' containers are started while one
    runs) and cold ones (`sandbox.warm: false`), interleaved with the `docker run` baseline.
    Network `open`: the egress proxy's cost is measured by `network`."""
    projects = {
        warm: make_repo(
            work / f"sandbox-{'warm' if warm else 'cold'}",
            {**NOOP_CONFIG, "sandbox": {"network": "open", "warm": warm}},
        )
        for warm in (True, False)
    }

    def docker_runs(n: int) -> None:
        for _ in range(n):
            sh("docker", "run", "--rm", IMAGE, "true")

    def run(warm: bool | None, n: int) -> Callable[[], None]:
        """n iterations with warm or cold containers; None: n x `docker run`."""
        if warm is None:
            return lambda: docker_runs(n)
        return lambda: fks("run", f"noop:{n}", "--sandbox", cwd=projects[warm])

    short_w, short_c, short_d, long_w, long_c, long_d = median_many(
        [run(warm, n) for n in (2, 12) for warm in (True, False, None)], repeat
    )
    per_w, per_c, per_d = (long_w - short_w) / 10, (long_c - short_c) / 10, (long_d - short_d) / 10
    warm_ratio, cold_ratio = per_w / per_d, per_c / per_d
    baseline = f"`docker run --rm {IMAGE} true` {per_d * 1000:.0f} ms"
    return [
        f'| sandbox: per iteration of `fks run "noop:N" --sandbox`, warm containers | {per_w * 1000:.0f} ms | {baseline} | {warm_ratio:.2f}x | <= 0.6x | {"ok" if warm_ratio <= 0.6 else "MISSED"} |',
        f"| sandbox: the same, cold (`sandbox.warm: false`) | {per_c * 1000:.0f} ms | {baseline} | {cold_ratio:.2f}x | <= 1.25x | {'ok' if cold_ratio <= 1.25 else 'MISSED'} |",
        f"| sandbox: fixed cost per run (start-up, checks, workspace), warm | {(short_w - 2 * per_w) * 1000:.0f} ms | cold {(short_c - 2 * per_c) * 1000:.0f} ms | - | reported | |",
    ]


def bench_network(work: Path, repeat: int) -> list[str]:
    """Per-iteration cost with the egress proxy (allowlist) against `open`, and the proxy's
    start-up per run: runs of 2 and 12 iterations, so fixed costs cancel out per iteration."""
    runs = {}
    for mode in ("allowlist", "open"):
        project = make_repo(work / f"net-{mode}", {**NOOP_CONFIG, "sandbox": {"network": mode}})
        runs[mode] = lambda k, p=project: fks("run", f"noop:{k}", "--sandbox", cwd=p)
    short_a, short_o = median_pair(lambda: runs["allowlist"](2), lambda: runs["open"](2), repeat)
    long_a, long_o = median_pair(lambda: runs["allowlist"](12), lambda: runs["open"](12), repeat)
    per_a, per_o = (long_a - short_a) / 10, (long_o - short_o) / 10
    ratio = per_a / per_o
    return [
        f"| network: per iteration, `allowlist` (egress proxy) | {per_a * 1000:.0f} ms | `open` {per_o * 1000:.0f} ms | {ratio:.2f}x | <= 1.10x | {'ok' if ratio <= 1.10 else 'MISSED'} |",
        f"| network: egress proxy start-up and removal, per run | {(short_a - short_o) * 1000:.0f} ms | - | - | reported | |",
    ]


def bench_exit(work: Path, repeat: int) -> list[str]:
    """From the `… complete` line to fks's exit, `fks run true --sandbox` on the 20,000-file
    repository (its workspace volume is removed after fks has returned)."""
    repo_path = big_repo(work)

    def volumes() -> list[str]:
        out = sh_out("docker", "volume", "ls", "-q", "--filter", f"label=fks.repo={repo_path}")
        return out.split()

    def once() -> float:
        while volumes():  # the last run's volume is gone: no deletion competes with this run
            time.sleep(0.1)
        proc = subprocess.Popen(
            [FKS, "run", "true", "--sandbox"],
            cwd=repo_path,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        complete = None
        for line in proc.stdout:
            if b"complete (1/1 steps)" in line:
                complete = time.perf_counter()
        proc.wait()
        if proc.returncode != 0 or complete is None:
            raise SystemExit(f"bench: fks run true --sandbox exited {proc.returncode}")
        return time.perf_counter() - complete

    once()  # warm-up
    times = [once() for _ in range(repeat)]
    print(f"exit after complete (ms): {[round(t * 1000) for t in times]}", file=sys.stderr)
    took = statistics.median(times)
    return [
        f"| exit: from `Chain complete` to fks's exit, `fks run true --sandbox`, 20,000-file repo | {took * 1000:.0f} ms | - | - | <= 1 s | {'ok' if took <= 1 else 'MISSED'} |",
    ]


def bench_output(work: Path, repeat: int) -> list[str]:
    size_mb = 200
    line = "x" * 99  # 100-byte lines: 2 million of them
    script = f"yes '{line}' | head -c {size_mb * 1024 * 1024}"
    project = make_repo(work / "output", {"agents": {"loud": {"path": "sh"}}, "noProgressLimit": 0})
    rss, t_fks_all, t_logs_all = [], [], []
    for attempt in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(
            [FKS, "run", "loud", "--sandbox", "--", "-c", script],
            cwd=project,
            env={**ENV, "FKS_MAX_LOG_BYTES": str(300 * 2**20)},  # all of it in the log
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, _status, usage = os.wait4(proc.pid, 0)
        t_fks_all.append(time.perf_counter() - start)
        rss.append(usage.ru_maxrss / 1024)
        name = f"fks-bench-logs-{os.getpid()}-{attempt}"
        sh("docker", "run", "--name", name, IMAGE, "sh", "-c", script)
        try:
            t_logs_all.append(
                timed(
                    functools.partial(
                        subprocess.run,
                        ["docker", "logs", name],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        check=True,
                    )
                )
            )
        finally:
            sh("docker", "rm", "-f", name)
    t_fks, t_logs, peak = statistics.median(t_fks_all), statistics.median(t_logs_all), max(rss)
    fks_mbs, logs_mbs = size_mb / t_fks, size_mb / t_logs
    ratio = fks_mbs / logs_mbs
    return [
        f"| output: 200 MB agent, fks peak memory | {peak:.0f} MB | - | - | < 150 MB | {'ok' if peak < 150 else 'MISSED'} |",
        f"| output: 200 MB agent, throughput (whole `fks run --sandbox`) | {fks_mbs:.0f} MB/s | `docker logs` {logs_mbs:.0f} MB/s | {ratio:.2f}x | >= 0.5x | {'ok' if ratio >= 0.5 else 'MISSED'} |",
    ]


def bench_image(work: Path, repeat: int) -> list[str]:
    """One cold build (no layer cache; it downloads the packages and Claude Code) into a tag of
    its own, removed afterwards; `repeat` does not apply."""
    import io

    from sandbox_runner.docker_daemon import docker_client
    from sandbox_runner.images import versions
    from sandbox_runner.images.base_image import DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE
    from sandbox_runner.images.build import assemble_context, build_context
    from sandbox_runner.images.lookup import image_exists

    client = docker_client()
    present = image_exists(client, DEFAULT_BASE_IMAGE)
    base = DEFAULT_BASE_IMAGE if present else LOCAL_BASE_IMAGE
    certs = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    context = assemble_context(work / "image", ca_certs=certs)
    tag = f"fks-agent:bench-{os.getpid()}"
    version = versions.CLAUDE_CODE_VERSION
    args = {"CLAUDE_CODE_VERSION": version, "NPM_REGISTRY": versions.npm_registry()}

    def build(cold: bool) -> None:
        out = io.StringIO()
        build_context(
            client, context, base_image=base, tag=tag, out=out, buildargs=args, no_cache=cold
        )

    try:
        cold = timed(lambda: build(True))
        again = timed(lambda: build(False))
        size = client.images.get(tag).attrs["Size"] / 1e6
    finally:
        client.images.remove(tag, force=True)
    base_size = client.images.get(base).attrs["Size"] / 1e6
    return [
        f"| image: agent image size (Claude Code {version}, no Node) | {size:.0f} MB | base {base} {base_size:.0f} MB | +{size - base_size:.0f} MB | <= 350 MB | {'ok' if size <= 350 else 'MISSED'} |",
        f"| image: cold build (no layer cache, base present) | {cold:.0f} s | - | - | reported | |",
        f"| image: build again, nothing changed | {again:.1f} s | - | - | reported | |",
    ]


def _machine_busy_s() -> float:
    """CPU-seconds the whole machine (every core, every process: dockerd, containerd, runc,
    the containers, fks) has been busy since boot (/proc/stat's first line)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _machine_cpu(fn: Callable[[], object], settle_s: float = 1.0) -> float:
    """The machine's CPU-seconds while `fn` runs and for `settle_s` after (what it leaves
    running, fks's workspace remover among it, finishes then)."""
    before = _machine_busy_s()
    fn()
    time.sleep(settle_s)
    return _machine_busy_s() - before


def bench_cpu(work: Path, repeat: int) -> list[str]:
    """The machine's CPU for one sandboxed iteration, end to end: `fks run noop:1 --sandbox`
    (default network, so with the egress proxy; the workspace's removal after it) against
    `docker run --rm IMAGE true`, alternating, each given the same second to settle after.
    Start-up included: this is what a CPU-bound machine (the test suite on 2 cores) pays."""
    project = make_repo(work / "cpu", NOOP_CONFIG)

    def sandboxed() -> None:
        fks("run", "noop:1", "--sandbox", cwd=project)

    def docker_run() -> None:
        sh("docker", "run", "--rm", IMAGE, "true")

    fks_cpu, docker_cpu = median_pair(sandboxed, docker_run, repeat, measure=_machine_cpu)
    return [
        f"| cpu: machine CPU of `fks run noop:1 --sandbox`, whole run (proxy, workspace, removal) | {fks_cpu:.2f} CPU-s | `docker run --rm {IMAGE} true` {docker_cpu:.2f} CPU-s | {fks_cpu / docker_cpu:.1f}x | reported | |"
    ]
