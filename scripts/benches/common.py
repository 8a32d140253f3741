"""What every benchmark uses: the fks under test, git repositories, timing by medians."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def sh_out(*argv: str) -> str:
    return subprocess.run(argv, env=ENV, check=True, text=True, capture_output=True).stdout


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_pair(
    a: Callable[[], object],
    b: Callable[[], object],
    repeat: int,
    warmup: int = 3,
    measure: Callable[[Callable[[], object]], float] = timed,
) -> tuple[float, float]:
    """Run a and b alternately `repeat` times after `warmup` unmeasured rounds; medians of each
    (of their wall time, or of what `measure` says of a run)."""
    for _ in range(warmup):  # page cache, CPU caches, .pyc files: measure the steady state
        a()
        b()
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(measure(a))
        tb.append(measure(b))
    return statistics.median(ta), statistics.median(tb)


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
