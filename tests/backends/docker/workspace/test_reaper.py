"""A finished run's workspace volume is removed after fks has returned, not before: fks does not
wait for Docker to delete the checkout. What a killed remover leaves, `fks clean` removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fks_testing.attacks import IMPORTED_FIRST, MARK, Host, module_payloads, writing
from fks_testing.helpers import FKS, eventually_none, fks
from fks_testing.sandboxed import (
    add_script,
    configure,
    record,
    sandbox,
    volumes,
    waiting_agent,
)

pytestmark = pytest.mark.docker

IMAGE = "fks-agent:latest"


def run_holding_the_workspace(repo: Path, tmp_path: Path) -> tuple[str, str, str]:
    """`fks run` whose workspace volume another container (not fks's) holds when the run ends,
    so it cannot be removed yet: (run id, volume, holder container). The run's environment holds
    `RUN_TAG=<tmp_path>`, which its remover (a copy of fks) inherits."""
    flags = tmp_path / "flags"
    flags.mkdir()
    add_script(repo, "wait.sh", waiting_agent(flags, "echo working"))
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    proc = subprocess.Popen(
        [FKS, "run", "./scripts/wait.sh:2", "--sandbox"],
        cwd=repo,
        env={**os.environ, "RUN_TAG": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    holder = ""
    try:
        eventually_none(lambda: [] if _agent_working(repo) else ["no agent"], "the run")
        rec = record(repo)
        volume = rec["steps"][0]["workspace"]
        hold = ["docker", "run", "-d", "--rm", "--network", "none", "-v", f"{volume}:/held"]
        holder = subprocess.run(
            [*hold, IMAGE, "sleep", "600"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (flags / "go").touch()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
    assert proc.returncode == 0, out + err
    assert "[fks] Complete after 1 iteration" in out
    return rec["id"], volume, holder


def _agent_working(repo: Path) -> bool:
    """The agent runs: its workspace volume is there, made by fks."""
    return any("working" in p.read_text() for p in repo.glob(".forge/runs/*/01-*/001.log"))


def test_fks_returns_before_the_workspace_is_removed(repo: Path, tmp_path: Path) -> None:
    run_id, volume, holder = run_holding_the_workspace(repo, tmp_path)
    try:
        assert volumes(run_id) == [volume]  # fks did not wait for it: it is still in use
        (remover,) = _removers(tmp_path)
        # It holds nothing of the run (its lock, logs, record) open: the next run starts.
        held = [str(fd.readlink()) for fd in Path(f"/proc/{remover}/fd").iterdir()]
        assert not [path for path in held if path.startswith(str(tmp_path))], held
        again = sandbox("./scripts/commit.sh:1")
        assert again.code == 1, again.output  # incomplete (no marker): it ran
        assert "[fks] Iteration 1/1" in again.stdout
        assert _removers(tmp_path) == [remover]  # still waiting for the volume
    finally:
        subprocess.run(["docker", "rm", "-f", holder], capture_output=True, check=False)
    eventually_none(lambda: volumes(run_id), "the workspace")  # removed once it is free


def test_clean_removes_what_a_killed_remover_left(repo: Path, tmp_path: Path) -> None:
    run_id, volume, holder = run_holding_the_workspace(repo, tmp_path)
    try:
        (remover,) = _removers(tmp_path)
        os.kill(remover, signal.SIGKILL)
    finally:
        subprocess.run(["docker", "rm", "-f", holder], capture_output=True, check=False)
    assert volumes(run_id) == [volume]
    res = fks("clean", cwd=repo)
    assert res.code == 0, res.output
    assert f"removed workspace volume {volume}" in res.stdout
    assert volumes(run_id) == []


def _removers(tmp_path: Path) -> list[int]:
    """The processes removing a run's volumes in the background, once its fks has returned:
    copies of that fks (their environment holds the run's tag) in a session not the tests', in `/`."""
    tag = f"RUN_TAG={tmp_path}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            alone = os.getsid(pid) != os.getsid(0)
            cwd = (entry / "cwd").readlink()
        except OSError:
            continue
        if tag in environ and alone and cwd == Path("/"):
            found.append(pid)
    return found


def test_modules_an_agent_lands_at_the_top_never_run_in_the_remover(repo: Path, host: Host) -> None:
    """The agent commits Python modules at the repository's top (`inspect.py`,
    `sandbox_runner/__init__.py`, …), each leaving a marker on the host when imported; the step
    lands; the remover, started from the repository after fks returns, imports none of them
    (and still removes the workspace)."""
    body = writing(module_payloads(host.markers))
    body += f"git add -A && git commit -qm 'modules at the top'\n{MARK}\n"
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 0, res.output[-3000:]
    assert all((repo / name).is_file() for name in IMPORTED_FIRST)  # landed in the checkout
    run_id = record(repo)["id"]
    deadline = time.monotonic() + 120
    while volumes(run_id) and not any(host.markers.iterdir()):
        assert time.monotonic() < deadline, "the workspace was never removed"
        time.sleep(0.1)
    host.check(res, merged=True)
    assert volumes(run_id) == []


def test_the_remover_imports_no_module_after_the_fork(tmp_path: Path) -> None:
    """What the forked remover runs was imported before the fork (`_load`): it looks up no
    module anywhere, so nothing on a path (a landed module, the working directory) can run."""
    script = (
        "import sys\n"
        "from sandbox_runner.backends.docker.workspace import reaper\n"
        "reaper._load()\n"
        "before = set(sys.modules)\n"
        "assert reaper.remove_all(['fks-test-no-such-volume']) == 0\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
