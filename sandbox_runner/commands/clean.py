"""`fks clean`: remove what finished, failed or killed runs left behind.

Containers labelled by fks whose run process is gone, the worktrees and staging directories
of runs that are not running (folders removed, worktrees pruned), optionally merged step
branches and old run records. A run that is still going is never touched.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from sandbox_runner.errors import EXIT_COMPLETE, UsageError
from sandbox_runner.resume import pid_alive
from sandbox_runner.store import RunRecord, RunStore, forge_dir, project_root


def _running(record: RunRecord | None) -> bool:
    return record is not None and record.status == "running" and pid_alive(record.pid)


def run(*, older_than: float | None, branches: bool, cwd: Path | None) -> int:
    if older_than is not None and older_than < 0:
        raise UsageError("--older-than must be a number of days (0 or more)")
    project = project_root((cwd or Path.cwd()).resolve())
    store = RunStore(project)
    records = {r.id: r for r in store.records()}
    removed = 0
    removed += _clean_containers()
    removed += _clean_worktrees(project, records)
    if branches:
        removed += _clean_branches(project, records)
    if older_than is not None:
        removed += _clean_records(store, records, older_than)
    print(f"fks clean: removed {removed} item(s)" if removed else "fks clean: nothing to remove")
    return EXIT_COMPLETE


def _clean_containers() -> int:
    """Containers of runs whose fks process is gone (any repository: they are all garbage)."""
    try:
        import docker
        import docker.errors

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception:
        return 0  # no Docker here: nothing of ours can be running in it
    from sandbox_runner.sandbox.docker import LABEL_PID, LABEL_RUN

    count = 0
    for container in client.containers.list(all=True, filters={"label": LABEL_RUN}):
        pid = container.labels.get(LABEL_PID, "")
        if pid.isdigit() and pid_alive(int(pid)) and container.status == "running":
            continue
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        print(f"removed container {container.short_id} (run {container.labels.get(LABEL_RUN)})")
        count += 1
    return count


def _repos_of(project: Path, records: dict[str, RunRecord]) -> set[Path]:
    repos = {project}
    for record in records.values():
        repos.update(Path(s.repo) for s in record.steps if s.repo)
    return {r for r in repos if r.is_dir()}


def _salvage(repo: Path, run_dir: Path, record: RunRecord | None) -> None:
    """Before deleting a dead run's staging: keep the commits its agent made."""
    from sandbox_runner.errors import WorkspaceError
    from sandbox_runner.workspace import open_repo, salvage_staging

    if record is None:
        return
    for step in record.steps:
        staging = run_dir / str(step.index)
        if step.branch and staging.is_dir() and step.repo and Path(step.repo) == repo:
            try:
                if salvage_staging(open_repo(repo), staging, step.branch):
                    print(
                        f"kept the last commits of {step.branch} (the run was killed before saving them)"
                    )
            except WorkspaceError as exc:
                print(f"warning: could not salvage {staging}: {exc}")


def _clean_worktrees(project: Path, records: dict[str, RunRecord]) -> int:
    from sandbox_runner.progress import git_common_dir
    from sandbox_runner.workspace import git

    count = 0
    for repo in _repos_of(project, records):
        if git_common_dir(repo) is None:
            continue
        for kind in ("sandbox", "worktrees"):
            folder = forge_dir(repo) / kind
            if not folder.is_dir():
                continue
            for entry in sorted(folder.iterdir()):
                if _running(records.get(entry.name)):
                    continue
                if kind == "sandbox":
                    _salvage(repo, entry, records.get(entry.name))
                if kind == "worktrees":
                    git(repo, "worktree", "remove", "--force", str(entry), check=False)
                if entry.exists():
                    shutil.rmtree(entry, ignore_errors=True)
                print(f"removed {entry}")
                count += 1
        git(repo, "worktree", "prune", check=False)
    return count


def _clean_branches(project: Path, records: dict[str, RunRecord]) -> int:
    from sandbox_runner.workspace import git, git_ok

    count = 0
    for record in records.values():
        if _running(record):
            continue
        for step in record.steps:
            if not (step.branch and step.merged and step.repo and step.base_branch):
                continue
            repo = Path(step.repo)
            if not git_ok(repo, "show-ref", "--verify", "-q", f"refs/heads/{step.branch}"):
                continue
            if not git_ok(repo, "merge-base", "--is-ancestor", step.branch, step.base_branch):
                continue  # the branch moved on after merging: keep it
            git(repo, "branch", "-D", step.branch)
            print(f"deleted branch {step.branch} (merged into {step.base_branch})")
            count += 1
    return count


def _clean_records(store: RunStore, records: dict[str, RunRecord], days: float) -> int:
    cutoff = time.time() - days * 86400
    count = 0
    for run_id, record in records.items():
        if _running(record) or record.started.timestamp() >= cutoff:
            continue
        shutil.rmtree(store.run_dir(run_id), ignore_errors=True)
        print(f"deleted run record {run_id}")
        count += 1
    return count
