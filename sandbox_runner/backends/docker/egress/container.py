"""The egress proxy's container: how it is made, how fks waits until it is ready, and its start
in a thread (beside the step's first container)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sandbox_runner.backends.docker.egress.glue import READY_LINE, SOCKET_DIR
from sandbox_runner.errors import SandboxError


def container_kwargs(
    image: str, script: str, labels: Mapping[str, str], volume: str
) -> dict[str, Any]:
    """`containers.create` arguments of the proxy's container (but its network): hardened,
    its socket volume mounted, `script` its command."""
    from docker.types import Mount

    return {
        "image": image,
        "command": ["sh", "-c", script],
        "user": "proxy",
        "labels": dict(labels),
        "mounts": [Mount(target=SOCKET_DIR, source=volume, type="volume")],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "init": True,
        "mem_limit": "256m",
        "pids_limit": 256,
        "detach": True,
        # Its log lines (one per request the agent makes) are read as they come: Docker
        # keeps a bounded, rotated few on the host's disk.
        "log_config": {"type": "json-file", "config": {"max-size": "16m", "max-file": "2"}},
    }


def wait_ready(container: Any, image: str, timeout: float) -> None:
    """Until the container printed READY_LINE; an error naming its last output if it exited
    or took longer than `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        if READY_LINE in output:
            return
        container.reload()
        exited = container.status in ("exited", "dead")
        if exited or time.monotonic() > deadline:
            what = (
                "exited before it was ready" if exited else f"was not ready after {timeout:.0f} s"
            )
            tail = " | ".join(output.strip().splitlines()[-5:]) or "no output"
            raise SandboxError(
                f"The egress proxy container ({image}) {what}: {tail}; "
                "is the image built by 'fks image build'?"
            )
        time.sleep(0.02)


def in_thread(work: Callable[[], None], name: str) -> Future[None]:
    """`work` run in a thread of its own; its outcome in the future."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)
