#!/usr/bin/env python3
"""fks benchmarks, each measured side by side with its baseline in one run, reported as ratios.

    python scripts/bench.py                 # everything (needs Docker and the fks-agent image)
    python scripts/bench.py --only startup local
    python scripts/bench.py --only sandbox workspace import output --repeat 3

Benchmarks:
  startup    `fks --help` and `fks run --dry-run` against `python -c pass`       (target: +200 ms at most)
  local      `fks run "noop:50"` against 50 bare spawns of the same agent         (target: +10 ms per iteration)
  sandbox    per iteration of `fks run "noop:N" --sandbox` against `docker run --rm IMAGE true`:
             warm containers (target: <= 0.6x); cold ones, `sandbox.warm: false` (target: <= 1.25x)
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
  forge      `fks forge run --parallel 4` on four independent tasks whose agents (the real claude
             CLI against a fake API) spend 5 s per stage, against one such task alone
                                                                                   (target: <= 1.4x)
  exit       from `Pipeline complete` to fks's exit, `fks run true --sandbox` on a 20,000-file
             repo (the workspace volume is removed after fks has returned)    (target: <= 1 s)
  output     an agent printing 200 MB: fks's peak memory, and its throughput against
             `docker logs` of the same output                                      (targets: < 150 MB, >= 0.5x)
  hostile    a bundle whose header names 2.75 million refs (157 MiB): fks's peak memory while
             refusing it (`import_bundle` in a process of its own; no Docker)      (target: < 150 MB)
  image      the agent image built from scratch (no layer cache; base present): its size against
             the base's, the cold build time, and a rebuild with nothing changed   (target: <= 350 MB)

The machines are noisy: every number is the median of --repeat runs after warm-up runs, and
baselines run interleaved with what they are compared to.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package from this checkout
IMAGE = os.environ.get("FKS_AGENT_IMAGE") or "fks-agent:latest"
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


def median_many(fns: list[Callable[[], object]], repeat: int, warmup: int = 3) -> list[float]:
    """`median_pair` for any number: run them in turn `repeat` times; the median of each."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, taken in zip(fns, times, strict=True):
            taken.append(timed(fn))
    return [statistics.median(taken) for taken in times]


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


# --- sandbox workspaces: the real iteration container, with timers inside it --------------------

# What the instrumented iteration script writes to stderr: `fks-bench <part>_ns=<nanoseconds>`.
_MARK = re.compile(rb"fks-bench (\w+)_ns=(\d+)")
_BUNDLE_LINE = (
    'git bundle create -q "$ex/bundle" $refs "^$FKS_SINCE" || say "error=git bundle create failed"'
)


def _timer(name: str, command: str) -> str:
    var = f"fks_t_{name}"
    return (
        f"{var}=$(date +%s%N); {command}; fks_rc=$?; "
        f'echo "fks-bench {name}_ns=$(( $(date +%s%N) - {var} ))" >&2; (exit $fks_rc)'
    )


def instrumented_script() -> str:
    """`iteration.sh` exactly as fks runs it, plus `date +%s%N` timers around its parts.

    prepare: from the start of the workspace checkout (a git dir of fks's making, then `clean
    -ffdx` of the folders changed since the last checkout, none here, and `checkout -f -B`:
    every file written on a new volume, only what changed on a recycled one) to the end of
    copying the base index to .git/index and reading its identity for the host, in one window
    (a timer costs a process); settle: after a full checkout of a
    big tree only, the wait for the file clock to leave the checkout's second (inside the
    prepare window: subtract it); snapshot: the progress fingerprint taken before the agent;
    export: all that runs after the agent (fingerprint, leftover commit, bundle); bundle: `git
    bundle create` alone.
    Stops if the script changed and a timer no longer fits.
    """
    from sandbox_runner.backends.docker.workspace import export

    text = export.script()
    for old, new in (
        ("ready=\nif prepare; then", "fks_t_prepare=$(date +%s%N)\nready=\nif prepare; then"),
        ("then settle && ready=1;", f"then {{ {_timer('settle', 'settle')}; }} && ready=1;"),
        (
            "    base_index || ready=\nfi\n",
            "    base_index || ready=\nfi\n"
            'echo "fks-bench prepare_ns=$(( $(date +%s%N) - fks_t_prepare ))" >&2\n',
        ),
        (
            "before=${FKS_BEFORE:-$(snapshot)}\n",
            _timer("snapshot", "before=${FKS_BEFORE:-$(snapshot)}") + "\n",
        ),
        (
            'say "before=$before"\nexport_work\n',
            f'say "before=$before"\n{_timer("export", "export_work")}\n',
        ),
        (_BUNDLE_LINE, _timer("bundle", _BUNDLE_LINE)),
    ):
        if text.count(old) != 1:
            raise SystemExit(f"bench: iteration.sh changed; cannot place a timer at {old!r}")
        text = text.replace(old, new)
    return text


def big_repo(work: Path) -> Path:
    """A repository of 20,000 files (200 folders x 100), packed like a cloned one; made once."""
    path = work / "big"
    if path.exists():
        return path
    path.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=path)
    for d in range(200):
        folder = path / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(100):
            (folder / f"mod{f:03d}.py").write_text(f"# module {d}/{f}\nVALUE = {d * 100 + f}\n")
    sh("git", "add", "-A", cwd=path)
    sh("git", "-c", "gc.auto=0", "commit", "-qm", "20000 files", cwd=path)
    sh("git", "repack", "-adq", cwd=path)
    sh("git", "prune-packed", cwd=path)
    sh("git", "config", "gc.auto", "0", cwd=path)  # no background gc while measuring
    return path


class Iterations:
    """Runs iterations the way `fks run --sandbox` does (`WorkspaceSandbox` on a volume, the
    hardened container of `container_settings`), with the timed script inside."""

    def __init__(self, repo_path: Path, client: object = None) -> None:
        """`client`: another engine's (the base is then sent to it, as for a remote run)."""
        import docker

        from sandbox_runner.backends.docker.workspace import export
        from sandbox_runner.git.repo import identity_env, open_repo

        self.remote = client is not None
        self.client = client or docker.from_env(timeout=120)
        self.repo = open_repo(repo_path)
        self.identity = identity_env(self.repo)
        self.volumes: list[str] = []
        timed_script = instrumented_script()
        self._script = export.script
        export.script = lambda: timed_script  # type: ignore[assignment]  # what wrapped() runs

    def workspace(self, name: str):  # type: ignore[no-untyped-def]
        from sandbox_runner.backends.docker.workspace.shipping import ShippedObjects
        from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace

        volume = f"fks-bench-{os.getpid()}-{name}"
        shipped = None
        if self.remote:
            shipped = ShippedObjects(
                self.client, self.repo, f"{volume}-obj", image=IMAGE, labels={}
            )
            self.volumes.append(shipped.name)
        ws = VolumeWorkspace(self.client, self.repo, volume, {}, shipped=shipped)
        ws.ensure()
        self.volumes.append(ws.name)
        return ws

    def sandbox(self, ws, branch: str, scratch: Path):  # type: ignore[no-untyped-def]
        from sandbox_runner.backends.docker.settings import container_settings
        from sandbox_runner.backends.docker.workspace.sandbox import WorkspaceSandbox

        settings = container_settings(IMAGE, ws.mounts(), {"fks.bench": str(os.getpid())})
        return WorkspaceSandbox(
            self.client,
            settings,
            ws,
            branch=branch,
            leftover="refs/fks/bench/leftover",
            scratch=scratch,
            new_step=True,
        )

    def run(
        self,
        sandbox,  # type: ignore[no-untyped-def]
        argv: tuple[str, ...],
        stopped: Callable[[str], object] | None = None,
    ) -> tuple[float, dict[str, float]]:
        """One iteration, up to the read of its export (not imported): wall seconds and the
        parts timed inside, in seconds. `stopped(container_id)` runs before its removal."""
        from sandbox_runner.backends.api import ExecSpec
        from sandbox_runner.backends.docker.workspace.export import WORKSPACE

        spec = ExecSpec(argv=argv, cwd=Path(WORKSPACE), env=self.identity, timeout=600)
        start = time.perf_counter()
        err = b""
        with sandbox.start(spec) as execution:
            for stream, chunk in execution.chunks():
                if stream == "stderr":
                    err += chunk
            result = execution.wait()
            wall = time.perf_counter() - start
            if stopped is not None:
                stopped(execution.id)
        if result.exit_code != 0:
            raise SystemExit(
                f"bench: iteration failed ({result.exit_code}): {err.decode()[-2000:]}"
            )
        return wall, {m[0].decode(): int(m[1]) / 1e9 for m in _MARK.findall(err)}

    def close(self) -> None:
        from sandbox_runner.backends.docker.client import remove_volume
        from sandbox_runner.backends.docker.workspace import export

        export.script = self._script  # type: ignore[method-assign]

        for name in self.volumes:
            remove_volume(self.client, name)


def bench_workspace(work: Path, repeat: int) -> list[str]:
    from sandbox_runner.git.repo import create_branch, rev

    repo_path = big_repo(work)
    its = Iterations(repo_path)
    firsts, laters, bare, step2_wall, snapshots, first_snaps, settles = [], [], [], [], [], [], []
    try:
        for attempt in range(repeat + 1):  # the first attempt warms the page cache
            ws = its.workspace(f"ws{attempt}")
            b1, b2 = f"fks/bench-{attempt}/1-x", f"fks/bench-{attempt}/2-x"
            create_branch(its.repo, b1, rev(its.repo, "main"))
            # Each step starts with the disk flushed: steps are minutes apart in real runs, and
            # a checkout's writeback would otherwise land on whatever runs next.
            os.sync()
            with tempfile.TemporaryDirectory() as scratch:
                _, first = its.run(its.sandbox(ws, b1, Path(scratch)), ("true",))
            # The base moves by 10 changed files (a landed step, or the user's commits): step 2
            # starts there, on the recycled volume, which still holds step 1's tree.
            for f in range(10):
                (repo_path / "pkg000" / f"mod{f:03d}.py").write_text(f"changed {attempt}\n")
            sh("git", "commit", "-qam", f"base moves {attempt}", cwd=repo_path)
            create_branch(its.repo, b2, rev(its.repo, "main"))
            os.sync()
            with tempfile.TemporaryDirectory() as scratch:
                wall, later = its.run(its.sandbox(ws, b2, Path(scratch)), ("true",))
            t_bare = timed(lambda: sh("docker", "run", "--rm", IMAGE, "true"))
            if "settle" in later or "settle" not in first:
                raise SystemExit("bench: step 2 did a full checkout, or step 1 did not")
            if attempt:
                firsts.append(first["prepare"] - first["settle"])
                laters.append(later["prepare"])
                settles.append(first["settle"])
                step2_wall.append(wall)
                bare.append(t_bare)
                snapshots.append(later["snapshot"])
                first_snaps.append(first["snapshot"])
    finally:
        its.close()
    first, later = statistics.median(firsts), statistics.median(laters)
    ratio = later / first
    for label, values in (("step 1", firsts), ("step 2", laters), ("settle", settles)):
        print(f"workspace {label} (ms): {[round(v * 1000) for v in values]}", file=sys.stderr)
    wall, t_bare, snap, snap1, settle = (
        statistics.median(x) for x in (step2_wall, bare, snapshots, first_snaps, settles)
    )
    return [
        f"| workspace: step 2+ preparation (in the container), 20,000-file repo, 10 files changed | {later * 1000:.0f} ms | step 1 (full checkout in a new volume) {first * 1000:.0f} ms | {ratio:.1%} | <= 10% | {'ok' if ratio <= 0.10 else 'MISSED'} |",
        f"| workspace: step 1's wait, after its full checkout, for the file clock to leave the checkout's second (so that step 2 need not re-read every file) | {settle * 1000:.0f} ms | - | - | reported | |",
        f"| workspace: a whole step 2+ iteration of `true` there (prepare, fingerprints, export, its read) | {wall * 1000:.0f} ms (fingerprint before the agent: {snap * 1000:.0f} ms) | `docker run --rm IMAGE true` {t_bare * 1000:.0f} ms | +{(wall - t_bare) * 1000:.0f} ms | - | - |",
        f"| workspace: step 1's fingerprint before the agent, right after the full checkout | {snap1 * 1000:.0f} ms | the same in step 2 {snap * 1000:.0f} ms | {snap1 / snap:.0f}x | - | - |",
    ]


def bench_import(work: Path, repeat: int) -> list[str]:
    """Host side of bringing one iteration's commits home: `read_export` (get_archive) +
    `import_bundle` (index-pack --strict, checks, update-ref), for an agent that committed 10
    changed files, against one that did nothing (no bundle: only the read)."""
    from sandbox_runner.backends.docker.workspace.export import read_export
    from sandbox_runner.git.bundles import import_bundle
    from sandbox_runner.git.repo import create_branch, rev

    repo_path = big_repo(work)
    its = Iterations(repo_path)
    branch = f"fks/bench-import-{os.getpid()}/1-x"
    create_branch(its.repo, branch, rev(its.repo, "main"))
    commit10 = (
        "sh",
        "-c",
        'for f in 0 1 2 3 4 5 6 7 8 9; do echo "step $(date +%s%N)" > pkg001/mod00$f.py; done; '
        "git commit -qam 'ten files'",
    )
    reads: dict[str, list[float]] = {"ten": [], "none": []}
    imports, bundles, exports = [], [], []
    try:
        ws = its.workspace("import")
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            sandbox = its.sandbox(ws, branch, scratch)
            its.run(sandbox, ("true",))  # the step's first iteration checks the workspace out
            tip = rev(its.repo, branch)
            for attempt in range(repeat + 3):  # 3 warm-up rounds
                for kind, argv in (("ten", commit10), ("none", ("true",))):
                    taken: list[float] = []

                    def take(container: str, taken: list[float] = taken) -> None:
                        # What `WorkspaceSandbox` does after each iteration: collect, then sync.
                        start = time.perf_counter()
                        export = read_export(its.client, container, scratch)
                        taken.append(time.perf_counter() - start)
                        start = time.perf_counter()
                        if export.bundle is not None:
                            import_bundle(
                                its.repo, export.bundle, branch, "refs/fks/bench/leftover"
                            )
                            export.bundle.unlink()
                        taken.append(time.perf_counter() - start)

                    _, parts = its.run(sandbox, argv, take)
                    if kind == "ten" and rev(its.repo, branch) == tip:
                        raise SystemExit("bench: the agent's commit was not imported")
                    tip = rev(its.repo, branch)
                    if attempt >= 3:
                        reads[kind].append(taken[0])
                        if kind == "ten":
                            imports.append(taken[1])
                            bundles.append(parts["bundle"])
                            exports.append(parts["export"])
    finally:
        its.close()
    read10, read0 = statistics.median(reads["ten"]), statistics.median(reads["none"])
    imp, bun, exp = (
        statistics.median(imports),
        statistics.median(bundles),
        statistics.median(exports),
    )
    total = read10 + imp
    return [
        f"| import: host side for 10 changed files (`read_export` {read10 * 1000:.0f} ms + `import_bundle` {imp * 1000:.0f} ms), 20,000-file repo | {total * 1000:.0f} ms | nothing committed (`read_export` only) {read0 * 1000:.0f} ms | +{(total - read0) * 1000:.0f} ms | <= 100 ms | {'ok' if total <= 0.1 else 'MISSED'} |",
        f"| import: in the container, `git bundle create` (whole export after the agent) | {bun * 1000:.0f} ms ({exp * 1000:.0f} ms) | - | - | - | - |",
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
        f"| exit: from `Pipeline complete` to fks's exit, `fks run true --sandbox`, 20,000-file repo | {took * 1000:.0f} ms | - | - | <= 1 s | {'ok' if took <= 1 else 'MISSED'} |",
    ]


def sh_out(*argv: str) -> str:
    return subprocess.run(argv, env=ENV, check=True, text=True, capture_output=True).stdout


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


_REFUSE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from sandbox_runner.git.bundles import import_bundle
from sandbox_runner.git.repo import open_repo
from sandbox_runner.git.runner import GitError
if len(sys.argv) > 3:
    try:
        import_bundle(open_repo(Path(sys.argv[2])), Path(sys.argv[3]), "fks/r/1-a", "refs/fks/r/1")
        sys.exit("the hostile bundle was taken")
    except GitError:
        pass
"""


def bench_hostile(work: Path, repeat: int) -> list[str]:
    """fks's peak RSS (`wait4`) importing a bundle with a 157 MiB header of refs, against the
    same process that only imports the module."""
    repo = make_repo(work / "hostile")
    tip = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    bundle = work / "hostile.bundle"
    with bundle.open("wb") as out:
        out.write(f"# v2 git bundle\n{tip} refs/heads/fks/r/1-a\n".encode())
        for start in range(0, 2_750_000, 10_000):
            out.write(
                b"".join(f"{tip} refs/tags/t{start + i:07d}\n".encode() for i in range(10_000))
            )
        out.write(b"\n")
    size = bundle.stat().st_size / 1024**2

    def peak(*argv: str) -> float:
        proc = subprocess.Popen([sys.executable, "-c", _REFUSE, str(ROOT), *argv], cwd=work)
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"bench hostile: the refusing process failed (status {status})")
        return usage.ru_maxrss / 1024

    hostile = max(peak(str(repo), str(bundle)) for _ in range(repeat))
    base = statistics.median(peak() for _ in range(repeat))
    return [
        f"| hostile: bundle header of 2.75 million refs ({size:.0f} MiB), fks peak memory refusing it | {hostile:.0f} MB | importing the module {base:.0f} MB | +{hostile - base:.0f} MB | < 150 MB | {'ok' if hostile < 150 else 'MISSED'} |"
    ]


def bench_image(work: Path, repeat: int) -> list[str]:
    """One cold build (no layer cache; it downloads the packages and Claude Code) into a tag of
    its own, removed afterwards; `repeat` does not apply."""
    import io

    from sandbox_runner.backends.docker import images, versions
    from sandbox_runner.backends.docker.base_image import DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE

    client = images.docker_client()
    present = images.image_exists(client, DEFAULT_BASE_IMAGE)
    base = DEFAULT_BASE_IMAGE if present else LOCAL_BASE_IMAGE
    certs = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    context = images.assemble_context(work / "image", ca_certs=certs)
    tag = f"fks-agent:bench-{os.getpid()}"
    version = versions.CLAUDE_CODE_VERSION
    args = {"CLAUDE_CODE_VERSION": version, "NPM_REGISTRY": versions.npm_registry()}

    def build(cold: bool) -> None:
        out = io.StringIO()
        images.build_context(
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


STAGE_SECONDS = 5.0


def _forge_team(request: object) -> object:
    """Every forge agent, answering its first request after STAGE_SECONDS."""
    if request.tool_results:
        return [{"text": "Done."}]
    system, prompt = request.system_text, request.prompt
    if "You implement one task" in system:
        name = re.search(r"Task (TASK-[0-9a-z]+)", prompt)
        command = (
            f"echo done > {name.group(1) if name else 'x'}.txt && git add -A && git commit -qm work"
        )
        blocks: object = [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
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
    sys.path.insert(0, str(ROOT / "tests"))
    from fakeapi import FakeAnthropic, isolated_environ

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


def bench_swarm(work: Path, repeat: int) -> list[str]:
    """`fks forge run --sandbox --parallel 4` of four tasks whose agents spend STAGE_SECONDS
    per stage, on a two-node swarm (this machine's engine and a second one in its own network
    namespace: tests/engines.py) against the same on this machine's engine alone, alternating.
    Network `open` for both (the egress proxy does not run on a swarm yet)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from engines import SecondEngine, TwoNodeSwarm
    from fakeapi import FakeAnthropic, isolated_environ

    config: dict[str, object] = {"sandbox": {"network": "open", "memory": "512m"}}
    walls: dict[str, list[float]] = {"swarm": [], "local": []}
    with SecondEngine() as second:
        sh(FKS, "image", "push", "--engine", second.url, "--image", IMAGE)
        with (
            TwoNodeSwarm(second) as swarm,
            FakeAnthropic(host="0.0.0.0", responder=_forge_team) as fake,
        ):
            node = swarm.main.nodes.get(swarm.worker_id)
            spec = node.attrs["Spec"]
            spec["Labels"] = {"fks.docker-socket": str(second.dir / "sock")}
            node.update(spec)
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


def bench_remote(work: Path, repeat: int) -> list[str]:
    """On a second engine that cannot see this machine's disk (tests/engines.py: a dockerd in
    a network namespace of its own, reached over TCP), its images sent first."""
    sys.path.insert(0, str(ROOT / "tests"))
    from engines import SecondEngine

    with SecondEngine() as engine:
        sh(FKS, "image", "push", "--engine", engine.url)
        return _remote_iterations(work, repeat, engine.url) + _remote_shipping(
            work, repeat, engine.client()
        )


def _remote_iterations(work: Path, repeat: int, url: str) -> list[str]:
    """Per iteration on the remote engine: `(T(noop:12) - T(noop:2)) / 10` against the same
    for `docker -H URL run --rm`."""
    project = make_repo(work / "remote", {**NOOP_CONFIG, "sandbox": {"network": "open"}})

    def run(n: int, bare: bool) -> Callable[[], None]:
        if bare:
            return lambda: [sh("docker", "-H", url, "run", "--rm", IMAGE, "true") for _ in range(n)]
        return lambda: fks("run", f"noop:{n}", "--sandbox", "--engine", url, cwd=project)

    short_f, short_d, long_f, long_d = median_many(
        [run(n, bare) for n in (2, 12) for bare in (False, True)], repeat
    )
    per_f, per_d = (long_f - short_f) / 10, (long_d - short_d) / 10
    ratio = per_f / per_d
    return [
        f'| remote: per iteration of `fks run "noop:N" --sandbox --engine tcp://…` | {per_f * 1000:.0f} ms | `docker -H tcp://… run --rm {IMAGE} true` {per_d * 1000:.0f} ms | {ratio:.2f}x | <= 1.3x | {"ok" if ratio <= 1.3 else "MISSED"} |',
        f"| remote: fixed cost per run there (start-up, checks, the base sent, first checkout) | {(short_f - 2 * per_f) * 1000:.0f} ms | - | - | reported | |",
    ]


def _remote_shipping(work: Path, repeat: int, client: object) -> list[str]:
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
                its.client.volumes.get(volume).remove(force=True)  # type: ignore[attr-defined]
    ship, checkout, clone = (statistics.median(x) for x in (ships, checkouts, clones))
    ratio = (ship + checkout) / clone
    return [
        f"| remote: the base of a 20,000-file repository into a fresh workspace there (pack sent and indexed {ship * 1000:.0f} ms, checkout {checkout * 1000:.0f} ms) | {(ship + checkout) * 1000:.0f} ms | `git clone --no-local` of it in a container there {clone * 1000:.0f} ms | {ratio:.2f}x | <= 1.5x | {'ok' if ratio <= 1.5 else 'MISSED'} |",
    ]


def _ship_and_checkout(its: Iterations, ws: Any, branch: str) -> tuple[float, float]:
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


BENCHES: dict[str, Callable[[Path, int], list[str]]] = {
    "startup": bench_startup,
    "local": bench_local,
    "sandbox": bench_sandbox,
    "network": bench_network,
    "workspace": bench_workspace,
    "import": bench_import,
    "output": bench_output,
    "hostile": bench_hostile,
    "exit": bench_exit,
    "forge": bench_forge,
    "image": bench_image,
    "remote": bench_remote,
    "swarm": bench_swarm,
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
