"""Sandbox workspaces: the real iteration container with timers inside it, on a
20,000-file repository: preparing a workspace and bringing commits home."""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benches.common import (
    IMAGE,
    big_repo,
    sh,
    timed,
)

if TYPE_CHECKING:
    from sandbox_runner.backends.docker.workspace.sandbox import WorkspaceSandbox
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace


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


class Iterations:
    """Runs iterations the way `fks run --sandbox` does (`WorkspaceSandbox` on a volume, the
    hardened container of `container_settings`), with the timed script inside."""

    def __init__(self, repo_path: Path, client: Any = None) -> None:
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

    def workspace(self, name: str) -> VolumeWorkspace:
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

    def sandbox(self, ws: VolumeWorkspace, branch: str, scratch: Path) -> WorkspaceSandbox:
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
        sandbox: WorkspaceSandbox,
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
        from sandbox_runner.backends.docker.engine.client import remove_volume
        from sandbox_runner.backends.docker.workspace import export

        export.script = self._script

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
                _, step1 = its.run(its.sandbox(ws, b1, Path(scratch)), ("true",))
            # The base moves by 10 changed files (a landed step, or the user's commits): step 2
            # starts there, on the recycled volume, which still holds step 1's tree.
            for f in range(10):
                (repo_path / "pkg000" / f"mod{f:03d}.py").write_text(f"changed {attempt}\n")
            sh("git", "commit", "-qam", f"base moves {attempt}", cwd=repo_path)
            create_branch(its.repo, b2, rev(its.repo, "main"))
            os.sync()
            with tempfile.TemporaryDirectory() as scratch:
                wall, step2 = its.run(its.sandbox(ws, b2, Path(scratch)), ("true",))
            t_bare = timed(lambda: sh("docker", "run", "--rm", IMAGE, "true"))
            if "settle" in step2 or "settle" not in step1:
                raise SystemExit("bench: step 2 did a full checkout, or step 1 did not")
            if attempt:
                firsts.append(step1["prepare"] - step1["settle"])
                laters.append(step2["prepare"])
                settles.append(step1["settle"])
                step2_wall.append(wall)
                bare.append(t_bare)
                snapshots.append(step2["snapshot"])
                first_snaps.append(step1["snapshot"])
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
