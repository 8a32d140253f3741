#!/usr/bin/env python3
"""fks benchmarks, each measured side by side with its baseline in one run, reported as ratios.

    python scripts/bench.py                 # everything (needs Docker and the fks-agent image)
    python scripts/bench.py --only startup local
    python scripts/bench.py --only sandbox workspace output --repeat 3

Benchmarks:
  startup    `fks --help` and `fks run --dry-run` against `python -c pass`       (target: +200 ms at most)
  local      `fks run "noop:50"` against 50 bare spawns of the same agent         (target: +10 ms per iteration)
  sandbox    `fks run "noop:10" --sandbox` against 10 x `docker run --rm IMAGE true` (target: <= 1.25x)
  workspace  preparing a step's worktree on a 20,000-file repo: later steps against the first
             (a full checkout)                                                     (target: <= 10%)
  output     an agent printing 200 MB: fks's peak memory, and its throughput against
             `docker logs` of the same output                                      (targets: < 150 MB, >= 0.5x)

The machines are noisy: every number is the median of --repeat runs after warm-up runs, and
baselines run interleaved with what they are compared to.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "fks-agent:latest"
FKS = shutil.which("fks") or str(Path(sys.executable).parent / "fks")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
ENV = {**os.environ, **GIT_ENV}


def sh(*argv: str, cwd: Path | None = None, quiet: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=ENV,
        check=True,
        text=True,
        stdout=subprocess.DEVNULL if quiet else None,
        stderr=subprocess.PIPE,
    )


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_pair(
    a: Callable[[], object], b: Callable[[], object], repeat: int, warmup: int = 3
) -> tuple[float, float]:
    """Run a and b alternately `repeat` times after `warmup` unmeasured rounds; medians of each."""
    for _ in range(warmup):  # page cache, CPU caches, .pyc files: measure the steady state
        a()
        b()
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(timed(a))
        tb.append(timed(b))
    return statistics.median(ta), statistics.median(tb)


def make_repo(path: Path, config: dict[str, object] | None = None) -> Path:
    path.mkdir(parents=True)
    sh("git", "init", "-q", "-b", "main", cwd=path)
    (path / "README.md").write_text("bench\n")
    if config is not None:
        (path / "forge").mkdir()
        (path / "forge" / "chains.json").write_text(json.dumps(config))
    sh("git", "add", "-A", cwd=path)
    sh("git", "commit", "-qm", "init", cwd=path)
    return path


# noop resolves to `true` on the host and in the image; the breaker is off (a noop makes no
# progress by design, and we measure the loop, not the breaker).
NOOP_CONFIG = {"agents": {"noop": {"path": "true"}}, "noProgressLimit": 0}


def fks(*args: str, cwd: Path) -> None:
    subprocess.run(
        [FKS, *args],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


# --- benchmarks --------------------------------------------------------------------------------


def bench_startup(work: Path, repeat: int) -> list[str]:
    project = make_repo(work / "startup", NOOP_CONFIG)
    py = lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)  # noqa: E731
    # What any typer + pydantic CLI pays before doing anything (fks must use both).
    floor_code = "import typer, pydantic\nclass M(pydantic.BaseModel):\n    x: int = pydantic.Field(default=1, gt=0)\nM(x=1)"
    floor = lambda: subprocess.run([sys.executable, "-c", floor_code], check=True)  # noqa: E731
    t_floor, t_base = median_pair(floor, py, repeat)
    rows = [
        f"| startup floor: `import typer, pydantic` + one model (for reference) | {t_floor * 1000:.0f} ms | `python -c pass` {t_base * 1000:.0f} ms | +{(t_floor - t_base) * 1000:.0f} ms | - | - |"
    ]
    for label, argv in (
        ("fks --help", ["--help"]),
        ('fks run --dry-run "noop:3 -> noop"', ["run", "--dry-run", "noop:3 -> noop"]),
    ):
        t_fks, t_py = median_pair(lambda a=argv: fks(*a, cwd=project), py, repeat)
        extra = (t_fks - t_py) * 1000
        rows.append(
            f"| startup: `{label}` | {t_fks * 1000:.0f} ms | `python -c pass` {t_py * 1000:.0f} ms | +{extra:.0f} ms ({t_fks / t_py:.1f}x) | +200 ms | {'ok' if extra <= 200 else 'MISSED'} |"
        )
    return rows


def bench_local(work: Path, repeat: int) -> list[str]:
    project = make_repo(work / "local", NOOP_CONFIG)
    true = shutil.which("true") or "/bin/true"
    n = 50

    def bare() -> None:
        for _ in range(n):
            subprocess.run([true], check=True)

    t50, tbare = median_pair(lambda: fks("run", f"noop:{n}", cwd=project), bare, repeat)
    t1 = statistics.median(timed(lambda: fks("run", "noop:1", cwd=project)) for _ in range(repeat))
    per_iteration = (t50 - t1) / (n - 1)
    per_spawn = tbare / n
    extra = (per_iteration - per_spawn) * 1000
    return [
        f'| local: `fks run "noop:{n}"` per iteration | {per_iteration * 1000:.1f} ms | bare spawn {per_spawn * 1000:.1f} ms | +{extra:.1f} ms ({per_iteration / per_spawn:.1f}x) | +10 ms | {"ok" if extra <= 10 else "MISSED"} |'
    ]


def bench_sandbox(work: Path, repeat: int) -> list[str]:
    project = make_repo(work / "sandbox", NOOP_CONFIG)
    n = 10

    def docker_runs() -> None:
        for _ in range(n):
            sh("docker", "run", "--rm", IMAGE, "true")

    t_fks, t_docker = median_pair(
        lambda: fks("run", f"noop:{n}", "--sandbox", cwd=project), docker_runs, repeat
    )
    ratio = t_fks / t_docker
    return [
        f'| sandbox: `fks run "noop:{n}" --sandbox` | {t_fks:.2f} s ({t_fks / n * 1000:.0f} ms/iteration) | {n} x `docker run --rm {IMAGE} true` {t_docker:.2f} s | {ratio:.2f}x | <= 1.25x | {"ok" if ratio <= 1.25 else "MISSED"} |'
    ]


def bench_workspace(work: Path, repeat: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from sandbox_runner.workspace import RunWorktree, open_repo

    repo_path = work / "big"
    repo_path.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=repo_path)
    for d in range(200):
        folder = repo_path / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(100):
            (folder / f"mod{f:03d}.py").write_text(f"# module {d}/{f}\nVALUE = {d * 100 + f}\n")
    sh("git", "add", "-A", cwd=repo_path)
    sh("git", "commit", "-qm", "20000 files", cwd=repo_path)
    repo = open_repo(repo_path)
    firsts, laters = [], []
    for attempt in range(repeat):
        tree = RunWorktree(repo, f"bench-{attempt}")
        base = sh("git", "rev-parse", "main", cwd=repo_path, quiet=False)
        firsts.append(timed(lambda t=tree, a=attempt: t.check_out(f"fks/bench-{a}/1-x", "main")))
        # the step changes 10 files and lands; the next step starts from the new tip
        for f in range(10):
            (tree.path / "pkg000" / f"mod{f:03d}.py").write_text(f"changed {attempt}\n")
        sh("git", "commit", "-qam", "step 1", cwd=tree.path)
        sh("git", "update-ref", "refs/heads/main", f"fks/bench-{attempt}/1-x", cwd=repo_path)
        laters.append(timed(lambda t=tree, a=attempt: t.check_out(f"fks/bench-{a}/2-x", "main")))
        tree.remove()
        del base
    first, later = statistics.median(firsts), statistics.median(laters)
    ratio = later / first
    return [
        f"| workspace: step 2+ preparation, 20,000-file repo, 10 files changed | {later * 1000:.0f} ms | first step (full checkout) {first * 1000:.0f} ms | {ratio:.1%} | <= 10% | {'ok' if ratio <= 0.10 else 'MISSED'} |"
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
            env=ENV,
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
                    lambda n=name: subprocess.run(
                        ["docker", "logs", n],
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


BENCHES: dict[str, Callable[[Path, int], list[str]]] = {
    "startup": bench_startup,
    "local": bench_local,
    "sandbox": bench_sandbox,
    "workspace": bench_workspace,
    "output": bench_output,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=list(BENCHES), help="run only these")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    args = parser.parse_args()
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
