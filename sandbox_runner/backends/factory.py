"""The one place a backend is built: the Docker sandbox when there are sandbox settings, else
local processes. The Docker backend (and the docker package) is imported only when chosen."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox_runner.backends.api import Backend, Sandbox
    from sandbox_runner.plan.config import AgentConfig
    from sandbox_runner.plan.sandbox import SandboxSettings


def make_backend(
    *,
    cwd: Path,
    agents: dict[str, AgentConfig],
    sandbox: SandboxSettings | None,
    base: str | None = None,
    checked_base: bool = False,
    keep_interrupted: bool = True,
    dry_run: bool = False,
    local_sandbox: Sandbox | None = None,
    secret_files: Sequence[str] = (),
) -> Backend:
    """A backend for the steps of `agents` in `cwd`.

    `sandbox`: the merged settings of a sandboxed run (None: local processes, where `base`,
    `checked_base` and `keep_interrupted` do not apply). `base`: the branch a sandboxed run
    starts from and lands on (None: the checked-out one), `checked_base`: the caller has
    checked it already, `keep_interrupted`: keep an interrupted step's workspace for
    `--resume`, `dry_run`: the steps are only shown (a secret not set here is shown so,
    not refused). `local_sandbox`: where local processes run (tests pass a fake).
    `secret_files`: what the project's secrets and caCerts read in the repository (relative to
    it): no landing of a sandboxed step changes them.
    """
    if sandbox is not None:
        from sandbox_runner.backends.docker.backend import SandboxBackend

        return SandboxBackend(
            cwd=cwd,
            agents=agents,
            settings=sandbox,
            base=base,
            checked_base=checked_base,
            keep_interrupted=keep_interrupted,
            dry_run=dry_run,
            secret_files=secret_files,
        )
    from sandbox_runner.backends.local import LocalBackend

    return LocalBackend(cwd=cwd, agents=agents, sandbox=local_sandbox)
