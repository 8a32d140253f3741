"""A big repository (38,400 files, the size of tldr-pages): one sandboxed step against the same
work done by hand in a git worktree, and what one iteration costs there."""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from benches.common import ENV, FKS, IMAGE, sh, sh_out, timed

FOLDERS, FILES = 384, 100

# An agent that commits one new file, as the step's and the committing iteration's work.
COMMIT = 'f="bench-$(date +%s%N).txt" && echo "$f" >"$f" && git add "$f" && git commit -qm "$f"'


def bench_repo(work: Path) -> Path:
    """38,400 files in 384 folders, packed like a cloned repository; main checked out."""
    path = work / "bigrepo"
    if path.exists():
        return path
    path.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=path)
    for d in range(FOLDERS):
        folder = path / "pages" / f"p{d:03d}"
        folder.mkdir(parents=True)
        for f in range(FILES):
            (folder / f"page{f:03d}.md").write_text(f"# page {d}/{f}\n\n> {d * FILES + f}\n")
    config = {
        "agents": {"agent": {"path": "sh"}},
        "noProgressLimit": 0,
        "sandbox": {"keepWorkspace": True},
    }
    (path / "forge").mkdir()
    (path / "forge" / "chains.json").write_text(json.dumps(config))
    sh("git", "add", "-A", cwd=path)
    sh("git", "-c", "gc.auto=0", "commit", "-qm", f"{FOLDERS * FILES} files", cwd=path)
    sh("git", "repack", "-adq", cwd=path)
    sh("git", "prune-packed", cwd=path)
    sh("git", "config", "gc.auto", "0", cwd=path)
    return path


def _fks(repo: Path, dsl: str, script: str) -> str:
    """`fks run DSL --sandbox -- -c SCRIPT`; the run's id. A loop without a marker ends
    incomplete (exit 1)."""
    out = subprocess.run(
        [FKS, "run", dsl, "--sandbox", "--", "-c", script],
        cwd=repo,
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode not in (0, 1) or (out.returncode and ":" not in dsl):
        raise SystemExit(f"bench: fks run {dsl} exited {out.returncode}: {out.stderr[-2000:]}")
    runs = sorted((repo / ".forge" / "runs").iterdir())
    return runs[-1].name


def _by_hand(repo: Path, n: int) -> None:
    """What a user does without fks: a worktree, one commit there, merged, the worktree gone."""
    tree, branch = repo.parent / f"hand-{n}", f"hand-{n}"
    sh("git", "worktree", "add", "-q", "-b", branch, str(tree), "main", cwd=repo)
    sh("sh", "-c", COMMIT, cwd=tree)
    sh("git", "merge", "-q", "--no-edit", branch, cwd=repo)
    sh("git", "worktree", "remove", str(tree), cwd=repo)
    sh("git", "branch", "-qd", branch, cwd=repo)


def _quiet(repo: Path) -> None:
    """The last run's workspace volume is gone (fks removes it after returning), but a kept
    one."""
    argv = ["docker", "volume", "ls", "-q", "--filter", f"label=fks.repo={repo}"]
    while sh_out(*argv, "--filter", "label=fks.run").split():
        time.sleep(0.1)


def _step_row(repo: Path, repeat: int) -> str:
    fks_t, hand_t = [], []
    for n in range(repeat + 1):  # the first round warms up
        _quiet(repo)
        os.sync()
        t_fks = timed(lambda: _fks(repo, "agent", COMMIT))
        _quiet(repo)
        os.sync()
        t_hand = timed(functools.partial(_by_hand, repo, n))
        if n:
            fks_t.append(t_fks)
            hand_t.append(t_hand)
    print(f"bigrepo step: fks {_ms(fks_t)}, by hand {_ms(hand_t)}", file=sys.stderr)
    a, b = statistics.median(fks_t), statistics.median(hand_t)
    r = a / b
    return (
        f"| bigrepo: one step committing one file, `fks run agent --sandbox`, {FOLDERS * FILES:,}"
        f"-file repo | {a:.2f} s | by hand: `git worktree add`, commit, merge, `worktree remove`"
        f" {b:.2f} s | {r:.2f}x | <= 0.8x | {'ok' if r <= 0.8 else 'MISSED'} |"
    )


def _ms(times: list[float]) -> list[int]:
    return [round(t * 1000) for t in times]


def _per_iteration(repo: Path, run_id: str) -> list[float]:
    """Seconds between the starts of consecutive iterations (the 2nd on), from the record."""
    record = json.loads((repo / ".forge" / "runs" / run_id / "run.json").read_text())
    starts = [datetime.fromisoformat(i["started"]) for i in record["steps"][0]["iterations"]]
    return [(b - a).total_seconds() for a, b in pairwise(starts[1:])]


def _iteration_rows(repo: Path, repeat: int) -> list[str]:
    kinds = {"commit": COMMIT, "noop": "true"}
    per: dict[str, list[float]] = {k: [] for k in kinds}
    bare: list[float] = []
    for n in range(repeat + 1):
        for kind, script in kinds.items():
            _quiet(repo)
            deltas = _per_iteration(repo, _fks(repo, "agent:12", script))
            bare.extend(timed(lambda: sh("docker", "run", "--rm", IMAGE, "true")) for _ in range(3))
            if n:
                per[kind].append(statistics.median(deltas))
    d = statistics.median(bare)
    rows = []
    for kind, target, what in (
        ("commit", 0.6, "an agent committing one file"),
        ("noop", 0.4, "an agent doing nothing"),
    ):
        p = statistics.median(per[kind])
        r = p / d
        print(f"bigrepo {kind} per iteration: {_ms(per[kind])}", file=sys.stderr)
        rows.append(
            f"| bigrepo: per iteration of `fks run agent:12 --sandbox`, {what}, "
            f"{FOLDERS * FILES:,}-file repo | {p * 1000:.0f} ms | `docker run --rm {IMAGE} true`"
            f" {d * 1000:.0f} ms | {r:.2f}x | <= {target}x | {'ok' if r <= target else 'MISSED'} |"
        )
    return rows


def bench_bigrepo(work: Path, repeat: int) -> list[str]:
    """With `sandbox.keepWorkspace` (the first round, a warm-up, makes the kept workspace)."""
    from sandbox_runner.backends.docker.workspace.kept import kept_volume_name

    repo = bench_repo(work)
    try:
        return [_step_row(repo, repeat), *_iteration_rows(repo, repeat)]
    finally:
        name = kept_volume_name(repo)
        if name is not None:
            subprocess.run(["docker", "volume", "rm", "-f", name], capture_output=True, check=False)
