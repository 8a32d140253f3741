"""Iterations as swarm services (backends/docker/swarm/service.py) on a real two-node swarm: output
from the log stream with stdout and stderr apart, the exit code from the task, the hardening,
timeouts, Ctrl-C, a node lost mid-iteration; and the bundle that leaves through the log stream
(logged_bundle.LoggedBundle), with what an agent could print to fool it."""

from __future__ import annotations

import io
import re
import secrets
import subprocess
import time
from pathlib import Path

import docker
import pytest
from fks_testing.engines import SecondEngine, TwoNodeSwarm
from fks_testing.helpers import fks
from fks_testing.swarm import IMAGE, services_of, settings

from sandbox_runner.backends.api import ExecResult, ExecSpec
from sandbox_runner.backends.docker.runners.container import Mount
from sandbox_runner.backends.docker.settings import TMPFS
from sandbox_runner.backends.docker.swarm.cleanup import remove_run_services
from sandbox_runner.backends.docker.swarm.execution import ServiceExecution
from sandbox_runner.backends.docker.swarm.nodes import run_script
from sandbox_runner.backends.docker.swarm.service import ServiceSandbox
from sandbox_runner.backends.docker.swarm.task_network import StepNetwork
from sandbox_runner.backends.docker.workspace.export import script
from sandbox_runner.backends.docker.workspace.logged_bundle import LoggedBundle
from sandbox_runner.errors import AgentNotFoundError, SandboxError

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]


@pytest.fixture(scope="module")
def worker_image(second_engine: SecondEngine) -> str:
    """The agent image on the second engine (sent once per test module)."""
    pushed = fks("image", "push", "--engine", second_engine.url, "--image", IMAGE)
    assert pushed.code == 0, pushed.output
    return IMAGE


@pytest.fixture(scope="module")
def swarm(module_swarm: TwoNodeSwarm, worker_image: str) -> TwoNodeSwarm:
    """One swarm for the module (swarm/conftest.py): each test keeps to its own run's labels."""
    return module_swarm


def run_in(
    sandbox: ServiceSandbox, command: str, *, timeout: float | None = None, **env: str
) -> tuple[list[tuple[str, bytes]], ExecResult, ServiceExecution]:
    spec = ExecSpec(argv=("sh", "-c", command), cwd=Path("/tmp"), env=env, timeout=timeout)
    with sandbox.start(spec) as execution:
        chunks = list(execution.chunks())
        result = execution.wait()
    return chunks, result, execution


def joined(chunks: list[tuple[str, bytes]], stream: str) -> bytes:
    return b"".join(data for name, data in chunks if name == stream)


def gone_from(client: docker.DockerClient, run: str, timeout: float = 120) -> bool:
    """Whether the node has no container of `run` left (Swarm removes them shortly after)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.api.containers(all=True, filters={"label": f"fks.run={run}"}):
            return True
        time.sleep(0.3)
    return False


def test_a_task_on_the_worker_streams_both_outputs_and_its_exit_code(swarm: TwoNodeSwarm) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    command = "echo out; echo err >&2; printf 'no newline'; exit 3"
    chunks, result, execution = run_in(sandbox, command)
    assert joined(chunks, "stdout") == b"out\nno newline"
    assert joined(chunks, "stderr") == b"err\n"
    assert result.exit_code == 3 and not result.timed_out
    assert result.container_id and result.container_id == execution.container_id
    assert execution.node_id == swarm.worker_id
    assert services_of(swarm.main, run) == []
    assert gone_from(swarm.second.client(), run)


def test_long_lines_and_much_output_arrive_whole(swarm: TwoNodeSwarm) -> None:
    """Log lines are cut into 16 KiB messages and lag behind the task: nothing is lost."""
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    command = "head -c 100000 /dev/zero | tr '\\0' a; echo; seq 1 50000 >&2; printf end"
    chunks, result, _ = run_in(sandbox, command)
    assert result.exit_code == 0
    assert joined(chunks, "stdout") == b"a" * 100000 + b"\nend"
    expected = "".join(f"{n}\n" for n in range(1, 50001)).encode()
    assert joined(chunks, "stderr") == expected


def test_a_silent_task_outlasts_the_client_timeout_and_wait_waits_for_its_end(
    swarm: TwoNodeSwarm,
) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    # Long enough for a busy engine's answers to the calls that make the service, not for the
    # task's silence.
    impatient = docker.from_env(timeout=10)
    sandbox = ServiceSandbox(impatient, settings(run), node=swarm.worker_id)
    chunks, result, _ = run_in(sandbox, "sleep 15; echo late")
    assert joined(chunks, "stdout") == b"late\n" and result.exit_code == 0
    spec = ExecSpec(argv=("sh", "-c", "sleep 2; exit 5"), cwd=Path("/tmp"))
    with sandbox.start(spec) as execution:
        assert execution.wait().exit_code == 5  # not the 0 a running task's status shows


PROBE = r"""
touch /fks-root 2>/dev/null && echo "root writable" || echo "root read-only"
touch /tmp/x && cp /bin/true /tmp/t && echo "tmp writable"
echo "ifaces $(ls /sys/class/net | tr '\n' ' ')"
echo "routes $(awk 'NR > 1 {print $2}' /proc/net/route | tr '\n' ' ')"
echo "caps $(grep CapEff /proc/self/status | cut -f2)"
echo "pids $(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)"
bash -c 'echo > /dev/tcp/$0/2377' "$MANAGER" 2>/dev/null && echo "manager reachable" || echo "manager unreachable"
"""


def test_network_none_read_only_root_and_limits(swarm: TwoNodeSwarm) -> None:
    """Swarm has no `none` network for services: the task gets an internal network of its own,
    one interface besides lo and no route off its subnet (the manager, listening, is out of
    reach). The root filesystem is read-only, /tmp writable, every capability dropped."""
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run, network="none"), node=swarm.worker_id)
    chunks, result, _ = run_in(sandbox, PROBE, MANAGER=swarm.second.host_ip)
    out = joined(chunks, "stdout").decode()
    assert result.exit_code == 0, chunks
    assert "root read-only" in out and "tmp writable" in out
    assert re.search(r"^ifaces eth0 lo $", out, re.M), out
    routes = re.search(r"^routes (.*)$", out, re.M)
    assert routes is not None and "00000000" not in routes.group(1).split(), out
    assert "manager unreachable" in out
    assert "caps 0000000000000000" in out and "pids 200" in out
    assert swarm.main.api.networks(filters={"label": f"fks.run={run}"}) == []
    open_sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    chunks, result, _ = run_in(open_sandbox, PROBE, MANAGER=swarm.second.host_ip)
    assert "manager reachable" in joined(chunks, "stdout").decode()


NEIGHBOURS = r"""
echo "net $(awk 'NR > 1 && $2 != "00000000" {print $2; exit}' /proc/net/route)"
echo "routes $(awk 'NR > 1 {print $2}' /proc/net/route | tr '\n' ' ')"
for port in 22 80 2375 2376 2377 3128 8080; do
  timeout 3 bash -c 'echo > /dev/tcp/$0/$1' "$KEEPER" "$port" 2>/dev/null && echo "keeper:$port open"
done
bash -c 'echo > /dev/tcp/$0/2377' "$MANAGER" 2>/dev/null && echo "manager reachable" || echo "manager unreachable"
"""


def test_a_steps_tasks_share_one_network_kept_up_by_a_keeper_that_listens_on_nothing(
    swarm: TwoNodeSwarm,
) -> None:
    """A step's iterations that are to reach nothing share one internal network, kept up on
    the step's node by a keeper service: each task still has no route off the subnet, and the
    keeper, its only neighbour, answers on no port. Closing the step removes both; after a
    kill, `remove_run_services` does."""
    run = f"swarm-{secrets.token_hex(4)}"
    network = StepNetwork(swarm.main)
    sandbox = ServiceSandbox(
        swarm.main, settings(run, network="none"), node=swarm.worker_id, network=network
    )
    try:
        nets = []
        for _ in range(2):
            keeper = keeper_address(swarm, run) if network.id else "127.0.0.1"
            chunks, result, _ = run_in(
                sandbox, NEIGHBOURS, KEEPER=keeper, MANAGER=swarm.second.host_ip
            )
            out = joined(chunks, "stdout").decode()
            assert result.exit_code == 0, chunks
            assert "00000000" not in re.search(r"^routes (.*)$", out, re.M).group(1).split()  # type: ignore[union-attr]
            assert "manager unreachable" in out and " open" not in out, out
            nets.append(re.search(r"^net (\S+)$", out, re.M).group(1))  # type: ignore[union-attr]
        assert nets[0] == nets[1], nets  # the same subnet: the same network
        (only,) = swarm.main.api.networks(filters={"label": f"fks.run={run}"})
        assert only["Id"] == network.id and only["Internal"], only
        roles = [s["Spec"]["Labels"].get("fks.role") for s in services_of(swarm.main, run)]
        assert roles == ["swarm-network-keeper"], roles  # the iterations' services are gone
    finally:
        network.close()
    assert services_of(swarm.main, run) == []
    assert swarm.main.api.networks(filters={"label": f"fks.run={run}"}) == []
    # Killed mid-step: the run's cleanup takes the keeper and the network.
    killed = StepNetwork(swarm.main)
    killed.join({"fks.run": run}, swarm.worker_id, IMAGE)
    assert remove_run_services(swarm.main, run) == 1
    assert services_of(swarm.main, run) == []
    assert swarm.main.api.networks(filters={"label": f"fks.run={run}"}) == []
    assert gone_from(swarm.second.client(), run)


def keeper_address(swarm: TwoNodeSwarm, run: str, timeout: float = 60) -> str:
    """The keeper's address on the step's network, once its task runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for service in services_of(swarm.main, run):
            if service["Spec"]["Labels"].get("fks.role") != "swarm-network-keeper":
                continue
            for task in swarm.main.api.tasks(filters={"service": service["ID"]}):
                if task["Status"]["State"] == "running" and task.get("NetworksAttachments"):
                    return str(task["NetworksAttachments"][0]["Addresses"][0]).split("/")[0]
        time.sleep(0.3)
    raise AssertionError("the keeper's task did not run")


def test_fks_own_script_ends_on_its_closing_line_with_its_output_whole_and_bounded(
    swarm: TwoNodeSwarm,
) -> None:
    """`run_script`: the script's closing token never shows, an unterminated last line is
    kept, a failing script has its exit code (and no token), and what it prints is bounded."""
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    spec = ExecSpec(argv=("sh", "-c", "echo one; echo err >&2; printf 'two'"), cwd=Path("/tmp"))
    ran = run_script(sandbox, spec)
    assert (ran.stdout, ran.stderr, ran.result.exit_code) == (b"one\ntwo", b"err\n", 0)
    assert ran.node == swarm.worker_id
    failing = ExecSpec(argv=("sh", "-c", "set -e; echo before; false; echo after"), cwd=Path("/"))
    ran = run_script(sandbox, failing)
    assert (ran.stdout, ran.result.exit_code) == (b"before\n", 1)
    flood = "head -c 6000000 /dev/zero | tr '\\0' a"
    ran = run_script(sandbox, ExecSpec(argv=("sh", "-c", flood), cwd=Path("/")))
    assert ran.result.exit_code == 0 and ran.stdout == b"a" * (4 << 20)
    assert services_of(swarm.main, run) == []


def test_a_bind_mount_is_refused_before_anything_starts(swarm: TwoNodeSwarm) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    mounts = [Mount(source="/etc"), Mount(source="fks-vol", target="/data", volume=True)]
    sandbox = ServiceSandbox(swarm.main, settings(run, mounts=mounts))
    spec = ExecSpec(argv=("true",), cwd=Path("/tmp"))
    with pytest.raises(SandboxError) as refused, sandbox.start(spec):
        pass
    message = str(refused.value)
    assert "cannot mount /etc into a swarm task" in message and "\n" not in message
    assert "only volumes" in message
    assert services_of(swarm.main, run) == []


def test_the_timeout_kills_the_task_and_ctrl_c_removes_the_service(swarm: TwoNodeSwarm) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    started = time.monotonic()
    chunks, result, _ = run_in(sandbox, "echo started; sleep 60", timeout=4)
    assert result.timed_out and time.monotonic() - started < 40  # not the task's 60 s
    assert joined(chunks, "stdout") == b"started\n"
    assert services_of(swarm.main, run) == []
    spec = ExecSpec(argv=("sh", "-c", "echo started; sleep 60"), cwd=Path("/tmp"))
    with pytest.raises(KeyboardInterrupt), sandbox.start(spec) as execution:
        for _ in execution.chunks():
            assert_kept_by_the_engine(swarm, run, execution.id)
            raise KeyboardInterrupt
    assert services_of(swarm.main, run) == []
    assert gone_from(swarm.second.client(), run)


def assert_kept_by_the_engine(swarm: TwoNodeSwarm, run: str, service_id: str) -> None:
    """The engine (API 1.41) kept every setting: none was dropped as unknown."""
    spec = swarm.main.api.inspect_service(service_id)["Spec"]
    template = spec["TaskTemplate"]
    container = template["ContainerSpec"]
    assert spec["Labels"]["fks.run"] == run and container["Labels"]["fks.run"] == run
    assert container["ReadOnly"] and container["Init"] and container["CapabilityDrop"] == ["ALL"]
    assert container["User"] == "1000:1000" and container["StopSignal"] == "SIGINT"
    assert {m["Target"]: m["Type"] for m in container["Mounts"]} == dict.fromkeys(TMPFS, "tmpfs")
    memory, cpus = 512 * 2**20, 500_000_000
    assert template["Resources"]["Limits"] == {"MemoryBytes": memory, "NanoCPUs": cpus, "Pids": 200}
    assert template["Resources"]["Reservations"] == {"MemoryBytes": memory, "NanoCPUs": cpus}
    assert template["RestartPolicy"]["Condition"] == "none"
    assert template["Placement"]["Constraints"] == [f"node.id=={swarm.worker_id}"]
    assert spec["Mode"] == {"Replicated": {"Replicas": 1}}


def test_a_missing_agent_or_image_is_one_clear_line(swarm: TwoNodeSwarm) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    spec = ExecSpec(argv=("no-such-agent", "-p"), cwd=Path("/tmp"))
    missing = "Agent 'no-such-agent' not found in the image"
    with pytest.raises(AgentNotFoundError, match=missing), sandbox.start(spec) as execution:
        list(execution.chunks())
        execution.wait()
    # An image the manager has and the worker has not (a label makes a new image id).
    image, _ = swarm.main.images.build(
        fileobj=io.BytesIO(f"FROM {IMAGE}\nLABEL fks.test={run}\n".encode()), rm=True
    )
    try:
        only_here = ServiceSandbox(swarm.main, settings(run, image=image.id), node=swarm.worker_id)
        with pytest.raises(SandboxError) as refused:
            run_in(only_here, "true")
        message = str(refused.value)
        assert "the image is not on swarm node" in message and "fks image push" in message
        assert "\n" not in message
    finally:
        swarm.main.images.remove(image.id, force=True)
    assert services_of(swarm.main, run) == []


def test_remove_run_services_removes_what_a_killed_run_left(swarm: TwoNodeSwarm) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    sandbox = ServiceSandbox(swarm.main, settings(run, network="none"))
    execution = sandbox.launch(ExecSpec(argv=("sleep", "60"), cwd=Path("/tmp")))
    try:
        assert len(services_of(swarm.main, run)) == 1
        assert remove_run_services(swarm.main, run) == 1
        assert services_of(swarm.main, run) == []
        assert swarm.main.api.networks(filters={"label": f"fks.run={run}"}) == []
        assert remove_run_services(swarm.main, run) == 0
    finally:
        execution.remove()


def log_bundle_function() -> str:
    """iteration.sh's own `log_bundle`, to run it outside a workspace."""
    found = re.search(r"^log_bundle\(\) \{\n.*?^\}\n", script(), re.S | re.M)
    assert found is not None
    return found.group(0)


MAKE_BUNDLE = r"""
set -e
git init -q -b work /tmp/repo && cd /tmp/repo
head -c 150000 /dev/urandom >blob && git add blob
git -c user.name=a -c user.email=a@b commit -qm one
mkdir /tmp/ex && git bundle create -q /tmp/ex/bundle refs/heads/work
echo "fks-bundle 0123456789abcdef AAAA" >&2
ex=/tmp/ex
"""


def test_a_real_bundle_leaves_through_the_log_stream(swarm: TwoNodeSwarm, tmp_path: Path) -> None:
    run = f"swarm-{secrets.token_hex(4)}"
    nonce = secrets.token_hex(8)
    sandbox = ServiceSandbox(swarm.main, settings(run), node=swarm.worker_id)
    command = MAKE_BUNDLE + log_bundle_function() + "log_bundle\necho done >&2\n"
    env = {"FKS_EXPORT_VIA": "log", "FKS_NONCE": nonce, "HOME": "/home/fks"}
    chunks, result, _ = run_in(sandbox, command, **env)
    assert result.exit_code == 0, chunks
    taken = LoggedBundle(nonce, tmp_path / "step.bundle")
    stderr = [data for name, data in chunks if name == "stderr"]
    assert max(map(len, stderr)) <= 16384 and len(stderr) > 10  # lines cut into messages
    passed = b"".join(taken.feed(data) for data in stderr) + taken.finish()
    assert passed == b"fks-bundle 0123456789abcdef AAAA\ndone\n"
    bundle = taken.result()
    assert bundle == tmp_path / "step.bundle"
    host = tmp_path / "host"
    subprocess.run(["git", "init", "-q", str(host)], check=True)
    fetch = ["git", "-C", str(host), "-c", "transfer.fsckObjects=true", "fetch", "-q"]
    subprocess.run([*fetch, str(bundle), "refs/heads/work:refs/heads/imported"], check=True)
    size = subprocess.run(
        ["git", "-C", str(host), "cat-file", "-s", "imported:blob"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert size.stdout.strip() == "150000"
