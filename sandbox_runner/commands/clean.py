"""`fks clean`: remove what finished, failed or killed runs left behind.

Only runs that are provably dead are touched: their fks process is gone. By default only the
runs of this repository (`--all`: of every repository). A dead run's containers are removed;
its workspace volumes are first exported, so the commits (and uncommitted files) its agent
left land on its step branch, then removed. Optionally branches whose work landed or that
hold no commit, and old records.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.store import (
    RunRecord,
    RunStore,
    pid_alive,
    project_root,
    run_alive,
)
from sandbox_runner.ui.output import plural

if TYPE_CHECKING:
    import docker
    from docker.models.volumes import Volume

    from sandbox_runner.backends.docker.workspace.sandbox import VolumeWorkspace
    from sandbox_runner.git.repo import Repo


def _running(record: RunRecord | None) -> bool:
    return record is not None and run_alive(record)


def _dead(labels: dict[str, str]) -> bool:
    """A container or volume whose fks process is gone (an unknown pid counts as alive)."""
    from sandbox_runner.labels import LABEL_PID

    pid = labels.get(LABEL_PID, "")
    return pid.isdigit() and not pid_alive(int(pid))


def run(*, older_than: float | None, branches: bool, cwd: Path | None, every: bool = False) -> int:
    if older_than is not None and older_than < 0:
        raise UsageError("--older-than must be a number of days (0 or more)")
    project = project_root((cwd or Path.cwd()).resolve())
    store = RunStore(project)
    records = {r.id: r for r in store.records()}
    repos = _repos_of(project, records)
    removed = _clean_docker(repos, records, every)
    removed += _clean_legacy_dirs(repos, records)
    removed += _clean_task_worktrees(project)
    if branches:
        removed += _clean_branches(records, project)
    if older_than is not None:
        removed += _clean_records(store, records, older_than)
    print(
        f"fks clean: removed {plural(removed, 'item')}"
        if removed
        else "fks clean: nothing to remove"
    )
    return EXIT_COMPLETE


def _repos_of(project: Path, records: dict[str, RunRecord]) -> set[str]:
    repos = {str(project)}
    for record in records.values():
        repos.update(s.repo for s in record.steps if s.repo)
    return repos


def _client(engine: str | None) -> docker.DockerClient | None:
    try:
        import docker

        if engine is None:
            client = docker.from_env(timeout=30)
            client.ping()
        else:
            from sandbox_runner.backends.docker.engines import engine_client
            from sandbox_runner.plan.engine import EngineSpec

            client = engine_client(EngineSpec.parse(engine), timeout=60)
    except Exception as exc:
        if engine is not None:
            print(f"warning: skipped engine {engine} of earlier runs: {exc}")
        return None  # no Docker there: nothing of ours can be running in it
    return client


def _engines(records: dict[str, RunRecord]) -> list[str | None]:
    """The local engine, and every other one a run that is not running used."""
    others = {r.engine for r in records.values() if r.engine and not _running(r)}
    return [None, *sorted(e for e in others if e is not None)]


def _clean_docker(repos: set[str], records: dict[str, RunRecord], every: bool) -> int:
    count = 0
    for engine in _engines(records):
        client = _client(None if engine == "swarm" else engine)
        if client is None:
            continue
        if engine == "swarm":
            count += _clean_swarm(client, repos, records, every)
        else:
            count += _clean_engine(client, engine, repos, records, every)
    return count


def _clean_swarm(
    client: docker.DockerClient, repos: set[str], records: dict[str, RunRecord], every: bool
) -> int:
    """Dead swarm runs: their services, then their volumes on every node (the work of a killed
    iteration on a swarm is not saved: its workspace is out of this machine's reach)."""
    from sandbox_runner.backends.docker.images import DEFAULT_AGENT_IMAGE
    from sandbox_runner.backends.docker.runners.service import remove_run_services
    from sandbox_runner.backends.docker.workspace.swarm import sweep_volumes
    from sandbox_runner.labels import LABEL_RUN

    dead = [
        record
        for record in records.values()
        if record.engine == "swarm"
        and not _running(record)
        and (every or {s.repo for s in record.steps if s.repo} & repos)
    ]
    if not dead:
        return 0
    count = 0
    try:
        for record in dead:
            if removed := remove_run_services(client, record.id):
                print(f"removed {plural(removed, 'service')} of run {record.id} on the swarm")
                count += removed
        labels = [f"{LABEL_RUN}={record.id}" for record in dead]
        swept = sweep_volumes(client, labels, DEFAULT_AGENT_IMAGE)
    except FksError as exc:
        print(f"warning: could not clean the swarm: {exc}")
        return count
    for line in swept:
        status, _, name = line.partition(" ")
        if status == "204":
            print(f"removed volume {name} on the swarm")
            count += 1
    return count


def _clean_engine(
    client: docker.DockerClient,
    engine: str | None,
    repos: set[str],
    records: dict[str, RunRecord],
    every: bool,
) -> int:
    from sandbox_runner.backends.docker.client import remove_volume
    from sandbox_runner.backends.docker.workspace.shipping import OBJECTS_ROLE
    from sandbox_runner.labels import LABEL_REPO, LABEL_ROLE, LABEL_RUN

    where = f" on {engine}" if engine else ""

    def ours(labels: dict[str, str]) -> bool:
        run_id = labels.get(LABEL_RUN, "")
        if _running(records.get(run_id)) or not _dead(labels):
            return False
        return every or labels.get(LABEL_REPO) in repos

    count = 0
    # ignore_removed: a container that goes away while listed (another run ending) is skipped.
    listed = client.containers.list(all=True, filters={"label": LABEL_RUN}, ignore_removed=True)
    for container in listed:
        if ours(container.labels) and _remove_container(container):
            run_id = container.labels.get(LABEL_RUN)
            print(f"removed container {container.short_id}{where} (run {run_id})")
            count += 1
    volumes = client.volumes.list(filters={"label": LABEL_RUN})
    # Workspaces first: saving their work may need their object store (on a remote engine).
    volumes.sort(key=lambda v: (v.attrs.get("Labels") or {}).get(LABEL_ROLE) == OBJECTS_ROLE)
    for volume in volumes:
        labels = volume.attrs.get("Labels") or {}
        if not ours(labels):
            continue
        role = labels.get(LABEL_ROLE)
        if role in ("egress-proxy", OBJECTS_ROLE):
            remove_volume(client, volume.name)
            what = "egress proxy" if role == "egress-proxy" else "object store"
            print(f"removed {what} volume {volume.name}{where} (run {labels.get(LABEL_RUN)})")
            count += 1
        elif _salvage_and_remove(client, engine, volume, labels, records):
            print(f"removed workspace volume {volume.name}{where} (run {labels.get(LABEL_RUN)})")
            count += 1
    return count


def _remove_container(container: object) -> bool:
    import docker.errors

    try:
        container.remove(force=True)  # type: ignore[attr-defined]
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: its removal is already in progress
            raise
        return False
    return True


def _record_for(run_id: str, repo: Path, records: dict[str, RunRecord]) -> RunRecord | None:
    if run_id in records:
        return records[run_id]
    try:
        return RunStore(project_root(repo)).load(run_id)
    except (FksError, OSError):
        return None


def _salvage_and_remove(
    client: docker.DockerClient,
    engine: str | None,
    volume: Volume,
    labels: dict[str, str],
    records: dict[str, RunRecord],
) -> bool:
    """Export a dead run's workspace onto its step branch, then remove the volume."""
    from sandbox_runner.backends.docker.client import remove_volume
    from sandbox_runner.labels import LABEL_REPO, LABEL_RUN

    run_id, repo = labels.get(LABEL_RUN, ""), Path(labels.get(LABEL_REPO, "/nonexistent"))
    record = _record_for(run_id, repo, records)
    if record is None or not repo.is_dir():
        print(
            f"kept workspace volume {volume.name}: no record of run {run_id} to save its work to; "
            f"remove it with 'docker volume rm {volume.name}'"
        )
        return False
    for step in record.steps:
        if step.workspace == volume.name and step.branch and step.status != "complete":
            _salvage_step(client, engine, volume.name, labels, record, step.index)
    remove_volume(client, volume.name)
    return True


def _salvage_step(
    client: docker.DockerClient,
    engine: str | None,
    name: str,
    labels: dict[str, str],
    record: RunRecord,
    index: int,
) -> None:
    from sandbox_runner.backends.docker.backend import container_settings
    from sandbox_runner.backends.docker.workspace.sandbox import WorkspaceSandbox
    from sandbox_runner.git.bundles import apply_leftover
    from sandbox_runner.git.repo import branch_exists, identity_env, leftover_ref, open_repo, rev
    from sandbox_runner.labels import LABEL_IMAGE, LABEL_REPO, LABEL_RUN

    step = record.steps[index - 1]
    assert step.branch is not None
    try:
        repo = open_repo(Path(labels[LABEL_REPO]), what="fks clean")
        if not branch_exists(repo.top, step.branch):
            return
        before = rev(repo, step.branch)
        image = labels.get(LABEL_IMAGE, "")
        workspace = _workspace(client, engine, repo, name, labels)
        settings = container_settings(
            image,
            workspace.mounts(),
            {LABEL_RUN: labels[LABEL_RUN]},
            user=_image_user(client, image),
        )
        env = identity_env(repo)
        leftover = leftover_ref(record.id, index)
        with tempfile.TemporaryDirectory(prefix="fks-export-") as scratch:
            sandbox = WorkspaceSandbox(
                client,
                settings,
                workspace,
                branch=step.branch,
                leftover=leftover,
                scratch=Path(scratch),
            )
            sandbox.export_now(env)
            synced = sandbox.sync(env)
        imported = rev(repo, step.branch) != before
        message = f"fks: what {step.agent} left uncommitted when run {record.id} stopped"
        committed = apply_leftover(repo, step.branch, leftover, message, env)
    except FksError as exc:
        print(f"warning: could not save the work in {name} to {step.branch}: {exc}")
        return
    if synced.error:
        print(f"warning: could not save the work in {name} to {step.branch}: {synced.error}")
    if imported:
        print(f"saved to {step.branch} the commits run {record.id} had not saved")
    if committed:
        print(f"committed what {step.agent} left uncommitted to {step.branch} ({committed[:12]})")


def _workspace(
    client: docker.DockerClient, engine: str | None, repo: Repo, name: str, labels: dict[str, str]
) -> VolumeWorkspace:
    """A dead run's workspace volume; on a remote engine with its object store beside it (what
    fks sent it before is sent again if need be)."""
    from sandbox_runner.backends.docker.workspace.sandbox import VolumeWorkspace
    from sandbox_runner.backends.docker.workspace.shipping import (
        ShippedObjects,
        objects_volume_name,
    )
    from sandbox_runner.labels import LABEL_IMAGE

    shipped = None
    if engine is not None:
        image = labels.get(LABEL_IMAGE, "")
        run_labels = {k: v for k, v in labels.items() if k != LABEL_IMAGE}
        shipped = ShippedObjects(
            client, repo, objects_volume_name(name), image=image, labels=run_labels
        )
    return VolumeWorkspace(client, repo, name, labels, shipped=shipped)


def _image_user(client: docker.DockerClient, image: str) -> str | None:
    """The user the step's containers ran as (a devcontainer's remoteUser), if its image says."""
    import docker as docker_module

    from sandbox_runner.backends.docker.images import image_user

    try:
        return image_user(client, image) if image else None
    except docker_module.errors.DockerException:
        return None


def _clean_task_worktrees(project: Path) -> int:
    """`fks forge`'s per-task worktrees that no live process holds (a killed run's)."""
    from sandbox_runner.forge.stages import WORKTREES
    from sandbox_runner.forge.work import WorkStore
    from sandbox_runner.git.runner import git, git_common_dir

    folder = ForgeLayout(project).root / WORKTREES
    if not folder.is_dir() or folder.is_symlink() or git_common_dir(project) is None:
        return 0
    store = WorkStore(project)
    count = 0
    for entry in sorted(folder.iterdir()):
        item = store.get(entry.name)
        if item is not None and item.held:
            continue
        git(project, "worktree", "remove", "--force", str(entry), check=False)
        shutil.rmtree(entry, ignore_errors=True)
        count += 1
    git(project, "worktree", "prune", check=False)
    return count


def _clean_legacy_dirs(repos: set[str], records: dict[str, RunRecord]) -> int:
    """`.forge/worktrees` and `.forge/sandbox` of runs made by older versions of fks."""
    from sandbox_runner.git.runner import git, git_common_dir

    count = 0
    for repo in (Path(r) for r in repos):
        if not repo.is_dir() or git_common_dir(repo) is None:
            continue
        for folder in ForgeLayout(repo).legacy_dirs:
            if not folder.is_dir() or folder.is_symlink():
                continue
            for entry in sorted(folder.iterdir()):
                if _running(records.get(entry.name)):
                    continue
                if entry.is_symlink() or not entry.is_dir():
                    entry.unlink()
                else:
                    shutil.rmtree(entry, ignore_errors=True)
                print(f"removed {entry}")
                count += 1
        git(repo, "worktree", "prune", check=False)
    return count


def _clean_branches(records: dict[str, RunRecord], project: Path) -> int:
    """Delete the step branches of finished runs, and forge task branches of finished tasks,
    whose work landed on their base or that hold no commit of their own; never one with work
    that did not land."""
    from sandbox_runner.git.bundles import drop_run_refs
    from sandbox_runner.git.repo import branch_exists, leftover_ref, open_repo
    from sandbox_runner.git.runner import git_ok

    count = 0
    for record in records.values():
        if _running(record):
            continue
        repos: set[Path] = set()
        for step in record.steps:
            if step.branch and step.repo and step.base_branch:
                repo = Path(step.repo)
                repos.add(repo)
                if not git_ok(
                    repo, "rev-parse", "--verify", "--quiet", leftover_ref(record.id, step.index)
                ):
                    count += _drop_if_done(repo, step.branch, step.base_branch, step.start_commit)
        for repo in repos:
            gone = all(
                not branch_exists(repo, s.branch)
                for s in record.steps
                if s.branch and s.repo == str(repo)
            )
            if gone:  # the run's hidden refs go with its last branch
                drop_run_refs(open_repo(repo, what="fks clean"), record.id)
    return count + _clean_task_branches(project)


def _clean_task_branches(project: Path) -> int:
    from sandbox_runner.forge.work import WorkStore

    try:
        items = WorkStore(project).items()
    except FksError as exc:
        print(f"warning: forge task branches not cleaned: {exc}")
        return 0
    return sum(
        _drop_if_done(project, item.branch, item.base, item.start_commit)
        for item in items
        if item.branch and item.base and item.status in ("completed", "failed")
    )


def _drop_if_done(repo: Path, branch: str, base: str, start: str | None) -> int:
    """Delete `branch` if its work is all on `base` or it holds no commit (1), else keep it (0)."""
    from sandbox_runner.git.repo import branch_exists
    from sandbox_runner.git.runner import git, git_ok

    if not repo.is_dir() or not branch_exists(repo, branch):
        return 0
    tip = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    if start is not None and tip == start:
        why = "it holds no commit of its own"
    elif branch_exists(repo, base) and git_ok(
        repo, "merge-base", "--is-ancestor", tip, f"refs/heads/{base}"
    ):
        why = f"its work is on {base}"
    else:
        return 0  # work that did not land: keep it
    # Deleted only if it still points where it was checked (old value given to update-ref).
    if not git_ok(repo, "update-ref", "-d", f"refs/heads/{branch}", tip):
        return 0
    print(f"deleted branch {branch} ({why})")
    return 1


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
