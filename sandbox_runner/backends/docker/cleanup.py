"""What dead runs left on an engine, found and removed (`fks clean`): containers, egress proxy
and object store volumes, and workspace volumes, whose work is first exported onto their step
branches (`salvage_step`, which every target's clean-up uses). Only runs that are provably dead
are touched: their fks process is gone. Also what a killed run left, removed when it is
resumed."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.backends.docker.egress.proxy import PROXY_ROLE
from sandbox_runner.backends.docker.engine.client import remove_volume
from sandbox_runner.backends.docker.settings import container_settings
from sandbox_runner.backends.docker.workspace.kept import (
    KEPT_ROLE,
    dead_holder_labels,
    forget,
    held,
    read_state,
)
from sandbox_runner.backends.docker.workspace.sandbox import Synced, WorkspaceSandbox
from sandbox_runner.backends.docker.workspace.shipping import OBJECTS_ROLE
from sandbox_runner.errors import FksError
from sandbox_runner.git.bundles import apply_leftover
from sandbox_runner.git.repo import branch_exists, identity_env, leftover_ref, open_repo, rev
from sandbox_runner.images.lookup import image_user
from sandbox_runner.labels import (
    LABEL_IMAGE,
    LABEL_PID,
    LABEL_REPO,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_RUNTIME,
)
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.signals import pid_alive

if TYPE_CHECKING:
    import docker
    from docker.models.volumes import Volume

    from sandbox_runner.backends.docker.target import DeadRun, DeadStep, Leftovers, Target
    from sandbox_runner.backends.docker.workspace.volume import VolumeWorkspace


def connected(
    connect: Callable[[], docker.DockerClient], engine: str | None
) -> docker.DockerClient | None:
    """A client, or None when there is no Docker there (nothing of ours can be running in it);
    a named `engine` that cannot be reached is said in a warning."""
    try:
        return connect()
    except Exception as exc:
        if engine is not None:
            print(f"warning: skipped engine {engine} of earlier runs: {exc}")
        return None


def _dead(labels: dict[str, str]) -> bool:
    """A container or volume whose fks process is gone (an unknown pid counts as alive)."""
    pid = labels.get(LABEL_PID, "")
    return pid.isdigit() and not pid_alive(int(pid))


def engines_used(leftovers: Leftovers) -> list[str | None]:
    """The local engine, and every other one a dead run used."""
    others = {r.engine for r in leftovers.dead.values() if r.engine}
    return [None, *sorted(e for e in others if e is not None)]


def remove_run_containers(client: docker.DockerClient, run_id: str) -> int:
    """Stop and remove every container of run `run_id` (a killed process may have left some)."""
    import docker.errors

    count = 0
    listed = client.containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={run_id}"}, ignore_removed=True
    )
    for container in listed:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress
                raise
        count += 1
    return count


def remove_run_proxy_volumes(client: docker.DockerClient, run_id: str) -> None:
    """The socket volumes of run `run_id`'s egress proxies (a killed process leaves them)."""
    wanted = [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}={PROXY_ROLE}"]
    for volume in client.volumes.list(filters={"label": wanted}):
        remove_volume(client, volume.name)


def remove_container(container: object) -> bool:
    """Remove a container; False if it was gone or its removal is already in progress."""
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


def clean_engine(
    client: docker.DockerClient,
    target: Target,
    engine: str | None,
    leftovers: Leftovers,
) -> int:
    """Dead runs' containers, then their volumes on one engine: workspaces exported onto
    their step branches first."""
    where = f" on {engine}" if engine else ""

    def ours(labels: dict[str, str]) -> bool:
        run_id = labels.get(LABEL_RUN, "")
        if run_id in leftovers.live or not _dead(labels):
            return False
        return leftovers.every or labels.get(LABEL_REPO) in leftovers.repos

    count = 0
    # ignore_removed: a container that goes away while listed (another run ending) is skipped.
    listed = client.containers.list(all=True, filters={"label": LABEL_RUN}, ignore_removed=True)
    for container in listed:
        if ours(container.labels) and remove_container(container):
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
        if role in (PROXY_ROLE, OBJECTS_ROLE):
            remove_volume(client, volume.name)
            what = "egress proxy" if role == PROXY_ROLE else "object store"
            print(f"removed {what} volume {volume.name}{where} (run {labels.get(LABEL_RUN)})")
            count += 1
        elif _salvage_and_remove(client, target, volume, labels, leftovers):
            print(f"removed workspace volume {volume.name}{where} (run {labels.get(LABEL_RUN)})")
            count += 1
    kept = client.volumes.list(filters={"label": f"{LABEL_ROLE}={KEPT_ROLE}"})
    return count + sum(_clean_kept(client, target, v, leftovers) for v in kept)


def _clean_kept(
    client: docker.DockerClient, target: Target, volume: Volume, leftovers: Leftovers
) -> bool:
    """A repository's kept workspace, if no run holds it: an unfinished step's work in it
    exported onto that step's branch first (see `workspace/kept.py`)."""
    project = Path((volume.attrs.get("Labels") or {}).get(LABEL_REPO, "/nonexistent"))
    if not leftovers.every and str(project) not in leftovers.repos:
        return False
    try:
        repo = open_repo(project, what="fks clean")
    except FksError:
        repo = None  # the repository is gone: so is anything its volume could save
    if repo is None:
        remove_volume(client, volume.name)
    else:
        with held(repo) as mine:
            state = read_state(repo)
            if state is not None and state.volume != volume.name:
                return False  # not this repository's (another's at the same path)
            holder = dead_holder_labels(repo) if mine else None
            if not mine or (holder is not None and holder[LABEL_RUN] in leftovers.live):
                return False
            if holder is None:
                remove_volume(client, volume.name)
            elif not _salvage_and_remove(client, target, volume, holder, leftovers):
                return False
            forget(repo)
    print(f"removed kept workspace volume {volume.name} ({project})")
    return True


def _salvage_and_remove(
    client: docker.DockerClient,
    target: Target,
    volume: Volume,
    labels: dict[str, str],
    leftovers: Leftovers,
) -> bool:
    """Export a dead run's workspace onto its step branch, then remove the volume."""
    run_id, repo = labels.get(LABEL_RUN, ""), Path(labels.get(LABEL_REPO, "/nonexistent"))
    record = leftovers.run(run_id, repo)
    if record is None or not repo.is_dir():
        print(
            f"kept workspace volume {volume.name}: no record of run {run_id} to save its work to; "
            f"remove it with 'docker volume rm {volume.name}'"
        )
        return False
    for step in record.unfinished:
        if step.workspace == volume.name:
            salvage_step(client, target, volume.name, labels, record, step)
    remove_volume(client, volume.name)
    return True


def salvage_step(
    client: docker.DockerClient,
    target: Target,
    name: str,
    labels: dict[str, str],
    run: DeadRun,
    step: DeadStep,
) -> None:
    """The commits the workspace holds that `step`'s branch has not got, and what its agent
    left uncommitted (as one commit), onto the branch."""
    try:
        repo = open_repo(Path(labels[LABEL_REPO]), what="fks clean")
        if not branch_exists(repo.top, step.branch):
            return
        before = rev(repo, step.branch)
        image = labels.get(LABEL_IMAGE, "")
        run_labels = {k: v for k, v in labels.items() if k != LABEL_IMAGE}
        workspace = target.workspace(client, repo, name, run_labels, image)
        env = identity_env(repo)
        leftover = leftover_ref(run.id, step.index)
        runtime = labels.get(LABEL_RUNTIME)
        synced = _export(
            client, workspace, (image, runtime), labels[LABEL_RUN], step.branch, leftover, env
        )
        imported = rev(repo, step.branch) != before
        message = f"fks: what {step.agent} left uncommitted when run {run.id} stopped"
        committed = apply_leftover(repo, step.branch, leftover, message, env)
    except FksError as exc:
        print(f"warning: could not save the work in {name} to {step.branch}: {exc}")
        return
    if synced.error:
        print(f"warning: could not save the work in {name} to {step.branch}: {synced.error}")
    if imported:
        print(f"saved to {step.branch} the commits run {run.id} had not saved")
    if committed:
        print(f"committed what {step.agent} left uncommitted to {step.branch} ({committed[:12]})")


def _export(
    client: docker.DockerClient,
    workspace: VolumeWorkspace,
    image_runtime: tuple[str, str | None],
    run_id: str,
    branch: str,
    leftover: str,
    env: dict[str, str],
) -> Synced:
    """Export the workspace from a container of its own (the image and runtime its step ran
    with) and import what it holds."""
    image, runtime = image_runtime
    settings = container_settings(
        image,
        workspace.mounts(),
        {LABEL_RUN: run_id},
        SandboxSettings.model_construct(runtime=runtime),
        user=_image_user(client, image),
    )
    with tempfile.TemporaryDirectory(prefix="fks-export-") as scratch:
        sandbox = WorkspaceSandbox(
            client, settings, workspace, branch=branch, leftover=leftover, scratch=Path(scratch)
        )
        sandbox.export_now(env)
        return sandbox.sync(env)


def _image_user(client: docker.DockerClient, image: str) -> str | None:
    """The user the step's containers ran as (a devcontainer's remoteUser), if its image says."""
    import docker as docker_module

    try:
        return image_user(client, image) if image else None
    except docker_module.errors.DockerException:
        return None
