"""`fks forge run` of several tasks whose agents (the real claude CLI against the fake
Messages API) spend a fixed time per stage: on this machine, and on a two-node swarm."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benches.common import (
    FKS,
    GIT_ENV,
    IMAGE,
    make_repo,
    sh,
)

if TYPE_CHECKING:
    from fks_testing.conversations import Request, Turn
    from fks_testing.engines import SecondEngine, TwoNodeSwarm


STAGE_SECONDS = 5.0


def _forge_team(request: Request) -> Turn:
    """Every forge agent, answering its first request after STAGE_SECONDS."""
    if request.tool_results:
        return [{"text": "Done."}]
    system, prompt = request.system_text, request.prompt
    if "You implement one task" in system:
        name = re.search(r"Task (TASK-[0-9a-z]+)", prompt)
        command = (
            f"echo done > {name.group(1) if name else 'x'}.txt && git add -A && git commit -qm work"
        )
        blocks: list[dict[str, Any]] = [
            {"tool": "Bash", "input": {"command": command, "description": "work"}}
        ]
    elif "You review the implementation" in system:
        blocks = [{"tool": "StructuredOutput", "input": {"approved": True}}]
    else:
        plan = {"complexity": "low", "plan": "Write the file.", "sufficient": True}
        blocks = [{"tool": "StructuredOutput", "input": plan}]
    return {"blocks": blocks, "delay": STAGE_SECONDS}


def _forge_repo(path: Path, tasks: int, config: dict[str, object] | None = None) -> Path:
    make_repo(path, config)
    for n in range(tasks):
        sh(FKS, "forge", "create", f"task {n}", cwd=path)
    sh("git", "add", "-A", cwd=path)
    sh("git", "commit", "-qm", "tasks", cwd=path)
    return path


def _cpu_of(pids: dict[int, float]) -> None:
    """Record the CPU seconds so far of every fks forge process (this user's, by /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"forge" in cmdline and any(
            b"sandbox_runner" in a or a.endswith(b"/fks") for a in cmdline
        ):
            pids[int(entry.name)] = (int(stat[11]) + int(stat[12])) / tick


def bench_forge(work: Path, repeat: int) -> list[str]:
    from fks_testing.fakeapi import FakeAnthropic, isolated_environ

    walls: dict[int, list[float]] = {1: [], 4: []}
    cpu: list[float] = []
    with FakeAnthropic(responder=_forge_team) as fake:
        env = {**isolated_environ(fake.env(work / "claude")), **GIT_ENV}
        for round_ in range(max(repeat, 1)):
            for tasks in (1, 4):
                repo = _forge_repo(work / f"forge-{round_}-{tasks}", tasks)
                pids: dict[int, float] = {}
                start = time.perf_counter()
                proc = subprocess.Popen(
                    [FKS, "forge", "run", "--parallel", "4"],
                    cwd=repo,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                while proc.poll() is None:
                    _cpu_of(pids)
                    time.sleep(0.1)
                walls[tasks].append(time.perf_counter() - start)
                if proc.returncode != 0:
                    raise SystemExit(f"fks forge run failed in {repo} (exit {proc.returncode})")
                if tasks == 4:
                    cpu.append(sum(pids.values()) / 4)
    one, four = statistics.median(walls[1]), statistics.median(walls[4])
    ratio = four / one
    return [
        f"| forge: `fks forge run --parallel 4`, 4 independent tasks, 3 stages of {STAGE_SECONDS:g} s each | {four:.1f} s | one task alone {one:.1f} s | {ratio:.2f}x | <= 1.4x | {'ok' if ratio <= 1.4 else 'MISSED'} |",
        f"| forge: fks's own CPU per task (conductor and worker processes, not claude or git) | {statistics.median(cpu):.2f} s | - | - | reported | |",
    ]


@contextmanager
def _two_node_swarm() -> Iterator[tuple[SecondEngine, TwoNodeSwarm]]:
    """A two-node swarm of this machine's engine and a second one in its own network
    namespace (testing/fks_testing/engines.py), the worker labelled with its engine (fks
    sends it the images by itself) and its socket."""
    from fks_testing.engines import SecondEngine, TwoNodeSwarm

    with SecondEngine() as second:
        sh(FKS, "image", "push", "--engine", second.url, "--image", IMAGE)
        with TwoNodeSwarm(second) as swarm:
            node = swarm.main.nodes.get(swarm.worker_id)
            spec = node.attrs["Spec"]
            spec["Labels"] = {"fks.docker-socket": str(second.dir / "sock")}
            spec["Labels"]["fks.docker-engine"] = second.url
            node.update(spec)
            yield second, swarm


def bench_swarm(work: Path, repeat: int) -> list[str]:
    """`fks forge run --sandbox --parallel 4` of four tasks whose agents spend STAGE_SECONDS
    per stage, on a two-node swarm against the same on this machine's engine alone,
    alternating. Network `open` for both."""
    from fks_testing.fakeapi import FakeAnthropic, isolated_environ

    config: dict[str, object] = {"sandbox": {"network": "open", "memory": "512m"}}
    walls: dict[str, list[float]] = {"swarm": [], "local": []}
    with (
        _two_node_swarm() as (second, _swarm),
        FakeAnthropic(host="0.0.0.0", responder=_forge_team) as fake,
    ):
        api = {"ANTHROPIC_BASE_URL": f"http://{second.host_ip}:{fake.port}"}
        env = {**isolated_environ({**api, "ANTHROPIC_API_KEY": "sk-ant-bench"}), **GIT_ENV}
        for round_ in range(max(repeat, 1)):
            for where in ("swarm", "local"):
                repo = _forge_repo(work / f"swarm-{round_}-{where}", 4, config)
                engine = ["--engine", "swarm"] if where == "swarm" else []
                argv = [FKS, "forge", "run", "--sandbox", "--parallel", "4", *engine]
                start = time.perf_counter()
                done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
                walls[where].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"bench: forge on {where} failed: {done.stderr[-2000:]}")
    on_swarm, alone = statistics.median(walls["swarm"]), statistics.median(walls["local"])
    return [
        f"| swarm: `fks forge run --sandbox --parallel 4 --engine swarm`, 4 tasks, 3 stages of {STAGE_SECONDS:g} s, two nodes | {on_swarm:.1f} s | the same on this machine's engine alone {alone:.1f} s | {on_swarm / alone:.2f}x | reported | |",
    ]


def bench_swarm_iteration(work: Path, repeat: int) -> list[str]:
    """Per iteration on a two-node swarm: the default network (`allowlist`, through the
    egress proxy on the node) against `open`."""
    with _two_node_swarm():
        return _swarm_iterations(work, repeat)


def _swarm_iterations(work: Path, repeat: int) -> list[str]:
    """Per iteration on the swarm, `(T(noop:12) - T(noop:2)) / 10`, with the default network
    (`allowlist`: every task through the egress proxy on its node) against `open`."""
    from benches.common import NOOP_CONFIG, median_many

    def run(n: int, network: str) -> Callable[[], None]:
        project = make_repo(
            work / f"swarm-iter-{network}-{n}", {**NOOP_CONFIG, "sandbox": {"network": network}}
        )

        def once() -> None:
            argv = [FKS, "run", f"noop:{n}", "--sandbox", "--engine", "swarm"]
            done = subprocess.run(
                argv, cwd=project, capture_output=True, text=True, env={**os.environ, **GIT_ENV}
            )
            if done.returncode not in (0, 1):  # 1: incomplete (noop never prints the marker)
                raise SystemExit(
                    f"bench: noop:{n} on the swarm ({network}) failed: {done.stderr[-2000:]}"
                )

        return once

    short_a, short_o, long_a, long_o = median_many(
        [run(n, network) for n in (2, 12) for network in ("allowlist", "open")], repeat, warmup=1
    )
    per_a, per_o = (long_a - short_a) / 10, (long_o - short_o) / 10
    ratio = per_a / per_o
    return [
        f'| swarm: per iteration of `fks run "noop:N" --sandbox --engine swarm`, default network (allowlist, through the proxy on the node) | {per_a * 1000:.0f} ms | the same with `network: open` {per_o * 1000:.0f} ms | {ratio:.2f}x | <= 1.15x | {"ok" if ratio <= 1.15 else "MISSED"} |',
        f"| swarm: fixed cost per run with allowlist (the proxy's service on every node, its secret, the step's network and its keeper) | {(short_a - 2 * per_a - (short_o - 2 * per_o)) * 1000:.0f} ms more than open | - | - | reported | |",
    ]
