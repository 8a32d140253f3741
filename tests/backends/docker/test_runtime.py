"""`sandbox.runtime` and `--runtime`: a step's containers under another OCI runtime (gVisor's
runsc), through the real CLI and engine; a runtime the engine lacks is refused before anything
starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fks_testing.helpers import agent_lines, fks
from fks_testing.sandboxed import (
    RUNTIMES,
    add_script,
    branches,
    configure,
    of_repo,
    record,
    runtime_args,
    sandbox,
)

pytestmark = pytest.mark.docker

KERNEL = """#!/bin/sh
# Which kernel answers the agent, and whether it reaches anything but the proxy.
n=$(ls kernel-*.txt 2>/dev/null | wc -l); n=$((n+1))
echo "kernel=$(uname -r)"
echo "dmesg=$(dmesg 2>/dev/null | head -n 1)"
echo "direct=$(curl -s -o /dev/null -m 5 -w '%{http_code}' --noproxy '*' http://172.17.0.1:2375/info || true)"
echo "$n" > kernel-$n.txt && git add kernel-$n.txt && git commit -qm "kernel $n"
[ "$n" -ge 2 ] && echo FORKHESTRA_COMPLETE
true
"""


def _seen(stdout: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in agent_lines(stdout) if line.startswith(f"{key}=")]


def test_the_agent_runs_under_gvisor_with_runsc_and_on_the_host_kernel_without(
    repo: Path,
) -> None:
    """`sandbox.runtime: runsc`: every iteration of a step (warm containers sharing their
    holder's namespace, and the egress forwarders) runs on gVisor's kernel, not the host's;
    its commits land as with runc. Without it the agent shares the host's kernel."""
    add_script(repo, "kernel.sh", KERNEL)
    configure(repo, {"sandbox": {"runtime": "runsc"}})
    res = sandbox("./scripts/kernel.sh:3")
    assert res.code == 0, res.output
    host_kernel = os.uname().release
    kernels, dmesg = _seen(res.stdout, "kernel"), _seen(res.stdout, "dmesg")
    assert len(kernels) == 2 and host_kernel not in kernels, res.stdout
    assert all("gVisor" in line for line in dmesg) and len(dmesg) == 2, res.stdout
    assert _seen(res.stdout, "direct") == ["000", "000"]  # no route of its own
    assert (repo / "kernel-2.txt").read_text() == "2\n"  # merged into main

    configure(repo, {"sandbox": {}})
    res = sandbox("./scripts/kernel.sh:1")
    assert res.code == 0, res.output  # (the third file: the marker)
    assert _seen(res.stdout, "kernel") == [host_kernel], res.stdout


def test_runtime_option_runs_a_cold_container_under_gvisor(repo: Path) -> None:
    """`--runtime runsc` on one iteration (no warm containers: the forwarders run in the
    agent's own container) overrides the config's runtime."""
    add_script(repo, "kernel.sh", KERNEL.replace('"$n" -ge 2', '"$n" -ge 1'))
    configure(repo, {"sandbox": {"runtime": "runc"}})
    res = sandbox("./scripts/kernel.sh:1", "--runtime", "runsc", "--dry-run")
    assert res.code == 0 and "runtime runsc" in res.stdout, res.output
    res = sandbox("./scripts/kernel.sh:1", "--runtime", "runsc")
    assert res.code == 0, res.output
    assert "gVisor" in _seen(res.stdout, "dmesg")[0], res.stdout
    assert _seen(res.stdout, "direct") == ["000"]


def _left_nothing(repo: Path) -> None:
    assert branches(repo) == ["main"]
    assert of_repo("ps", repo) == [] and of_repo("volume", repo) == []
    runs = repo / ".forge" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_runtime_the_engine_lacks_is_one_line_and_leaves_nothing(repo: Path) -> None:
    res = sandbox("./scripts/commit.sh:2", "--runtime", "runsc-missing")
    assert res.code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "no runtime 'runsc-missing'" in res.stderr and "apt-get install runsc" in res.stderr
    assert "daemon.json" in res.stderr and "Traceback" not in res.output
    _left_nothing(repo)

    configure(repo, {"sandbox": {"runtime": "kata"}})
    res = sandbox("./scripts/commit.sh:2")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "sandbox.runtime: the Docker engine has no runtime 'kata'" in res.stderr
    _left_nothing(repo)

    configure(repo, {"sandbox": {"runtime": "rnusc"}})
    res = sandbox("./scripts/commit.sh:2")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "no runtime 'rnusc' (did you mean 'runsc'?)" in res.stderr
    _left_nothing(repo)


def test_a_bad_runtime_name_or_one_without_sandbox_is_a_usage_error(repo: Path) -> None:
    configure(repo, {"sandbox": {"runtime": "run sc"}})
    res = sandbox("./scripts/commit.sh:2")
    assert res.code == 2 and "sandbox.runtime" in res.stderr, res.output
    assert "'run sc' is not a runtime's name" in res.stderr
    configure(repo, {"sandbox": {}})
    res = sandbox("./scripts/commit.sh:2", "--runtime", "--oops")
    assert res.code == 2 and "--runtime" in res.stderr, res.output
    res = fks("run", "./scripts/commit.sh:2", "--runtime", "runsc")
    assert res.code == 2 and "--runtime only applies to --sandbox runs" in res.stderr
    _left_nothing(repo)


SOCKETS = """#!/bin/sh
# Under gVisor the agent may connect to Unix sockets of its mounts (--host-uds=open): which?
ln -s /var/run/docker.sock docker-link.sock
for path in docker-link.sock /var/run/docker.sock /run/docker.sock \\
    /proc/1/root/var/run/docker.sock /fks-proxy/../../var/run/docker.sock; do
  echo "docker-api=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --unix-socket "$path" http://docker/info || true)"
done
ln -s /fks-proxy/proxy.sock mine.sock 2>/dev/null; rm -f /fks-proxy/proxy.sock 2>/dev/null
echo "proxy-socket-kept=$([ -S /fks-proxy/proxy.sock ] && echo yes)"
echo FORKHESTRA_COMPLETE
"""


def test_under_gvisor_the_agent_reaches_no_host_socket_but_the_proxys(repo: Path) -> None:
    """gVisor is registered to let a container connect to Unix sockets in its mounts (the
    egress proxy's): the host's Docker socket stays out of reach however it is named, and
    the proxy's socket cannot be removed or replaced."""
    assert Path("/var/run/docker.sock").is_socket()  # there to be reached, on this machine
    add_script(repo, "sockets.sh", SOCKETS)
    res = sandbox("./scripts/sockets.sh:1", "--runtime", "runsc")
    assert res.code == 0, res.output
    assert _seen(res.stdout, "docker-api") == ["000"] * 5, res.stdout
    assert _seen(res.stdout, "proxy-socket-kept") == ["yes"], res.stdout


FORKS = """#!/bin/sh
# Starts far more processes than the step's pidsLimit (64) allows, then reports and commits.
python3 - <<'EOF'
import errno, os, time
kids, refused, errors = [], 0, set()
for _ in range(300):
    try:
        pid = os.fork()
    except OSError as exc:
        refused += 1
        errors.add(errno.errorcode.get(exc.errno, str(exc.errno)))
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print(f"started={len(kids)}")
print(f"refused={refused}")
print(f"errors={','.join(sorted(errors))}")
for pid in kids:
    os.kill(pid, 9)
for pid in kids:
    os.waitpid(pid, 0)
EOF
echo survived > forks.txt && git add forks.txt && git commit -qm "survived the forks"
echo FORKHESTRA_COMPLETE
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_more_processes_than_pids_limit_fail_to_fork_and_the_iteration_goes_on(
    repo: Path, runtime: str
) -> None:
    """An agent that starts more processes than `pidsLimit` gets EAGAIN from fork for the ones
    over it, and its iteration goes on, commits and lands: under runc (the container's pids
    cgroup) and under runsc alike (gVisor's own kernel counts the agent's processes; the
    host's cgroup also counts gVisor's own threads, which must not end the whole sandbox)."""
    add_script(repo, "forks.sh", FORKS)
    configure(repo, {"sandbox": {"pidsLimit": 64}})
    res = sandbox("./scripts/forks.sh:1", *runtime_args(runtime))
    assert res.code == 0, res.output
    started, refused = _seen(res.stdout, "started"), _seen(res.stdout, "refused")
    assert len(started) == 1 and 32 < int(started[0]) < 64, res.stdout
    assert int(refused[0]) == 300 - int(started[0]), res.stdout
    assert _seen(res.stdout, "errors") == ["EAGAIN"], res.stdout
    assert (repo / "forks.txt").read_text() == "survived\n"  # committed, exported, merged
    (iteration,) = record(repo)["steps"][0]["iterations"]
    assert iteration["reason"] == "marker" and iteration["exit_code"] == 0, iteration
