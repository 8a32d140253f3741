"""Benchmark of gVisor: `fks run --sandbox` per iteration under `sandbox.runtime: runsc`
against the engine's default runtime (runc), with warm containers and with cold ones."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from benches.common import IMAGE, NOOP_CONFIG, fks, make_repo, median_many, sh

LONG = 22
"""Iterations of the long runs."""


def bench_runtime(work: Path, repeat: int) -> list[str]:
    """Runs of 2 and 22 iterations (fixed costs cancel out per iteration), interleaved: runsc
    and runc, warm containers (the default) and cold ones (`sandbox.warm: false`), with the
    default network (the egress proxy, on runc either way); and one bare container's start
    and removal under each, the floor of a cold iteration."""
    cases = [(runtime, warm) for warm in (True, False) for runtime in ("runsc", "runc")]
    projects = {
        (runtime, warm): make_repo(
            work / f"runtime-{runtime}-{'warm' if warm else 'cold'}",
            {**NOOP_CONFIG, "sandbox": {"runtime": runtime, "warm": warm}},
        )
        for runtime, warm in cases
    }

    def run(case: tuple[str, bool], n: int) -> Callable[[], None]:
        return lambda: fks("run", f"noop:{n}", "--sandbox", cwd=projects[case])

    times = median_many([run(case, n) for n in (2, LONG) for case in cases], repeat)
    short, long = dict(zip(cases, times[:4], strict=True)), dict(zip(cases, times[4:], strict=True))
    per = {case: (long[case] - short[case]) / (LONG - 2) for case in cases}
    fixed = {case: short[case] - 2 * per[case] for case in cases}
    rows = []
    for warm, what in ((True, "warm containers"), (False, "cold (`sandbox.warm: false`)")):
        gvisor, runc = per[("runsc", warm)], per[("runc", warm)]
        rows.append(
            f"| runtime: per iteration under runsc (gVisor), {what} | {gvisor * 1000:.0f} ms | "
            f"runc {runc * 1000:.0f} ms | {gvisor / runc:.2f}x | reported | |"
        )
    gvisor, runc = fixed[("runsc", True)], fixed[("runc", True)]
    rows.append(
        f"| runtime: fixed cost per run under runsc (start-up, checks, proxy, workspace), warm "
        f"| {gvisor * 1000:.0f} ms | runc {runc * 1000:.0f} ms | +{(gvisor - runc) * 1000:.0f} ms | reported | |"
    )
    bare: list[Callable[[], object]] = [
        functools.partial(
            sh, "docker", "run", "--rm", "--network", "none", "--runtime", runtime, IMAGE, "true"
        )
        for runtime in ("runsc", "runc")
    ]
    gvisor, runc = median_many(bare, repeat)
    rows.append(
        f"| runtime: `docker run --rm --network none --runtime runsc {IMAGE} true` | "
        f"{gvisor * 1000:.0f} ms | runc {runc * 1000:.0f} ms | {gvisor / runc:.2f}x | reported | |"
    )
    return rows
