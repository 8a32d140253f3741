"""fks's own scripts run as swarm services (a node's volumes listed or swept, a workspace's
base loaded): their output, bounded, and an end that waits for no late output."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import ExecResult, ExecSpec

if TYPE_CHECKING:
    from sandbox_runner.backends.docker.runners.service import ServiceSandbox

_SCRIPT_OUTPUT_LIMIT = 4 << 20


@dataclass(frozen=True)
class ScriptRun:
    """What a service running one of fks's own scripts printed, and how it ended."""

    stdout: bytes
    stderr: bytes
    result: ExecResult
    node: str | None


def run_script(sandbox: ServiceSandbox, spec: ExecSpec) -> ScriptRun:
    """Run fks's own `sh -c SCRIPT …` (`spec.argv`) as a service, its output bounded: the
    script closes with a line of a random token once it has succeeded, and the log stream waits
    for no late output after that line (see `LogPump.settle`)."""
    shell, flag, script, *args = spec.argv
    token = f"fks-script-done-{secrets.token_hex(8)}\n".encode()
    closed = replace(spec, argv=(shell, flag, f"{script}\necho {token.decode().strip()}", *args))
    out, err = bytearray(), bytearray()
    with sandbox.start(closed) as execution:
        for stream, chunk in execution.chunks():
            kept = out if stream == "stdout" else err
            kept += chunk[: max(0, _SCRIPT_OUTPUT_LIMIT - len(kept))]
            if stream == "stdout" and out.endswith(token):
                execution.settle()
        result = execution.wait()
        node = execution.node_id
    stdout = bytes(out[: -len(token)] if out.endswith(token) else out)
    return ScriptRun(stdout=stdout, stderr=bytes(err), result=result, node=node)
