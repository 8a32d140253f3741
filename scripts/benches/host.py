"""Benchmarks on the host alone (no Docker): start-up, local iterations, a hostile bundle."""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benches.common import (
    NOOP_CONFIG,
    fks,
    make_repo,
    median_pair,
    timed,
)


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
        t_fks, t_py = median_pair(functools.partial(fks, *argv, cwd=project), py, repeat)
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


_REFUSE = """
import sys
from pathlib import Path
from sandbox_runner.git.bundles import import_bundle
from sandbox_runner.git.repo import open_repo
from sandbox_runner.git.runner import GitError
if len(sys.argv) > 2:
    try:
        import_bundle(open_repo(Path(sys.argv[1])), Path(sys.argv[2]), "fks/r/1-a", "refs/fks/r/1")
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
        proc = subprocess.Popen([sys.executable, "-c", _REFUSE, *argv], cwd=work)
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"bench hostile: the refusing process failed (status {status})")
        return usage.ru_maxrss / 1024

    hostile = max(peak(str(repo), str(bundle)) for _ in range(repeat))
    base = statistics.median(peak() for _ in range(repeat))
    return [
        f"| hostile: bundle header of 2.75 million refs ({size:.0f} MiB), fks peak memory refusing it | {hostile:.0f} MB | importing the module {base:.0f} MB | +{hostile - base:.0f} MB | < 150 MB | {'ok' if hostile < 150 else 'MISSED'} |"
    ]
