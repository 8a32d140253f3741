#!/usr/bin/env python3
"""fks benchmarks, each measured side by side with its baseline in one run, reported as ratios.

    .venv/bin/python scripts/bench.py       # everything (needs Docker and the fks-agent image)
    .venv/bin/python scripts/bench.py --only startup local
    .venv/bin/python scripts/bench.py --only sandbox workspace import output --repeat 3

Run it with the Python that has fks installed (the test setup's .venv): it imports the package
and its `fks_testing` helpers. The benchmarks are in scripts/benches/.

Benchmarks:
  startup    `fks --help` and `fks run --dry-run` against `python -c pass`       (target: +200 ms at most)
  local      `fks run "noop:50"` against 50 bare spawns of the same agent         (target: +10 ms per iteration)
  sandbox    per iteration of `fks run "noop:N" --sandbox` against `docker run --rm IMAGE true`:
             warm containers (target: <= 0.6x); cold ones, `sandbox.warm: false` (target: <= 1.25x)
  cpu        the whole machine's CPU for one `fks run noop:1 --sandbox` (proxy, workspace, its
             removal after) against `docker run --rm IMAGE true`                   (reported)
  network    per iteration with `network: allowlist` (the egress proxy) against `open`
                                                                                   (target: <= 1.10x)
  runtime    per iteration under `sandbox.runtime: runsc` (gVisor) against runc, warm containers
             and cold ones, and the fixed cost per run                            (reported)
  secrets    per request to a local HTTPS origin with a secret (TLS ended in the proxy) against
             one tunnelled untouched (reported); per iteration with a secret configured against
             `open`                                                                (target: <= 1.10x)
  meter      per request, a streamed model API answer with its usage read by the egress proxy's
             meter against the same hop passing it through unread       (target: <= 1.05x)
  workspace  preparing a step's workspace volume on a 20,000-file repo, timed inside the real
             iteration container: step 2+ (recycled volume) against step 1 (full checkout)
                                                                                   (target: <= 10%)
  import     bringing 10 changed files home: `read_export` + `import_bundle` on the host
             against an iteration that committed nothing                       (target: <= 100 ms)
  remote     on a second engine reached over TCP (started here, as the tests do): per iteration
             against `docker -H … run --rm IMAGE true` there (target: <= 1.3x); the base of a
             20,000-file repository into a fresh workspace there against `git clone --no-local`
             of it                                                                 (target: <= 1.5x)
  swarm      `fks forge run --sandbox --parallel 4` of four 5-second-per-stage tasks on a two-node
             swarm (started here, as the tests do) against the same on this machine's engine
                                                                                   (reported)
  swarm-iteration  per iteration of `fks run "noop:N" --sandbox --engine swarm` with the default
             network (`allowlist`, the egress proxy on the node) against `open`     (target: <= 1.15x)
  forge      `fks forge run --parallel 4` on four independent tasks whose agents (the real claude
             CLI against a fake API) spend 5 s per stage, against one such task alone
                                                                                   (target: <= 1.4x)
  exit       from `Chain complete` to fks's exit, `fks run true --sandbox` on a 20,000-file
             repo (the workspace volume is removed after fks has returned)    (target: <= 1 s)
  output     an agent printing 200 MB: fks's peak memory, and its throughput against
             `docker logs` of the same output                                      (targets: < 150 MB, >= 0.5x)
  hostile    a bundle whose header names 2.75 million refs (157 MiB): fks's peak memory while
             refusing it (`import_bundle` in a process of its own; no Docker)      (target: < 150 MB)
  ui         `fks ui` over HTTP: the runs page with 5,000 runs, and a run page whose step has
             1,000 iterations (generated records; no Docker)          (target: < 300 ms each)
  bigrepo    on a generated 38,400-file repository: one step committing one file against the same
             done by hand (`git worktree add`, commit, merge, `worktree remove`) (target: <= 0.8x);
             per iteration (from the record's iteration starts) of an agent committing a file and
             of one doing nothing against `docker run --rm IMAGE true`   (targets: <= 0.6x, <= 0.4x)
  image      the agent image built from scratch (no layer cache; base present): its size against
             the base's, the cold build time, and a rebuild with nothing changed   (target: <= 350 MB)
  clis       each other agent CLI started in the image with every CLI (FKS_AGENT_CLIS_IMAGE,
             default fks-agent:clis) for one turn against a fake of its API, against Claude Code
                                                                                   (reported)

The machines are noisy: every number is the median of --repeat runs after warm-up runs, and
baselines run interleaved with what they are compared to.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benches.bigrepo import bench_bigrepo
from benches.clis import bench_clis
from benches.forge import bench_forge, bench_swarm, bench_swarm_iteration
from benches.host import bench_hostile, bench_local, bench_startup
from benches.meter import bench_meter
from benches.remote import bench_remote
from benches.runtime import bench_runtime
from benches.sandbox import (
    bench_cpu,
    bench_exit,
    bench_image,
    bench_network,
    bench_output,
    bench_sandbox,
)
from benches.secrets import bench_secrets
from benches.ui import bench_ui
from benches.workspace import bench_import, bench_workspace

BENCHES: dict[str, Callable[[Path, int], list[str]]] = {
    "startup": bench_startup,
    "local": bench_local,
    "sandbox": bench_sandbox,
    "cpu": bench_cpu,
    "network": bench_network,
    "runtime": bench_runtime,
    "secrets": bench_secrets,
    "meter": bench_meter,
    "workspace": bench_workspace,
    "import": bench_import,
    "output": bench_output,
    "hostile": bench_hostile,
    "exit": bench_exit,
    "forge": bench_forge,
    "image": bench_image,
    "clis": bench_clis,
    "bigrepo": bench_bigrepo,
    "ui": bench_ui,
    "remote": bench_remote,
    "swarm": bench_swarm,
    "swarm-iteration": bench_swarm_iteration,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=list(BENCHES), help="run only these")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    args = parser.parse_args()
    if importlib.util.find_spec("sandbox_runner") is None:
        sys.exit(
            "bench: fks is not installed for this Python; run .venv/bin/python scripts/bench.py"
            " (scripts/test makes .venv)"
        )
    print("| benchmark | fks | baseline | ratio / extra | target | |")
    print("|---|---|---|---|---|---|")
    failed = False
    with tempfile.TemporaryDirectory(prefix="fks-bench-") as tmp:
        for name in args.only or list(BENCHES):
            for row in BENCHES[name](Path(tmp), args.repeat):
                print(row, flush=True)
                failed |= row.endswith("MISSED |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
