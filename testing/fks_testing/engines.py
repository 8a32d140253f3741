"""A second Docker engine for the tests, in a network namespace of its own, reached over TCP.

The recipe of ../shared/ENVIRONMENT.md: a veth pair joins the namespace to the host (the host
end `host_ip`, the engine's end `ip`); `dockerd` runs inside it through `nsenter --net` with
its data, exec root, socket and pid file in a temporary directory. `SecondEngine` is a `with`
block: everything it started is stopped by pid and its namespace and veth deleted on success,
failure and Ctrl-C (and, as a last resort, at interpreter exit). `TwoNodeSwarm` makes a swarm
of the main engine and a SecondEngine, and both leave it at the end.

Fixtures: `second_engine` (session) and `two_node_swarm`, registered in conftest.py.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import docker
import pytest

from sandbox_runner.labels import LABEL_REPO, LABEL_RUN, LABEL_SOCKET

PORT = 2375
READY_TIMEOUT_S = 60.0
SWARM_LABEL = "fks.test.swarm"
"""The label of the swarms TwoNodeSwarm makes: one a test could not leave is left by the next."""
STOP_TIMEOUT_S = 30.0
NAME_PREFIX = "fkse"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (even by kill -9)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _free_subnet() -> int:
    """A third octet X with 10.231.X.0/24 unused on this machine (other sessions use it too)."""
    used = _sh("ip", "-4", "-o", "addr").stdout
    for _ in range(200):
        third = random.randint(1, 254)
        if f"10.231.{third}." not in used:
            return third
    raise RuntimeError("no free 10.231.X.0/24 subnet for a second Docker engine")


class SecondEngine:
    """`dockerd` in network namespace `netns`, listening on tcp://`ip`:2375."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name = f"{NAME_PREFIX}-{tag}"
        self.netns = self.name
        self.veth_host = f"{NAME_PREFIX}{tag}a"  # at most 15 characters
        self.veth_engine = f"{NAME_PREFIX}{tag}b"
        third = _free_subnet()
        self.host_ip = f"10.231.{third}.1"
        self.ip = f"10.231.{third}.2"
        self.url = f"tcp://{self.ip}:{PORT}"
        self.bip = f"172.31.{third}.1/24"
        # /tmp, not pytest's tmp_path: a Unix socket path must stay under 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.process: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def __enter__(self) -> SecondEngine:
        atexit.register(self.stop)
        try:
            self._make_namespace()
            self._start_dockerd()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def client(self, *, timeout: int = 120) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=timeout)

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The docker CLI against this engine."""
        return _sh("docker", "-H", self.url, *args, check=check)

    def _make_namespace(self) -> None:
        ns = ("ip", "netns", "exec", self.netns)  # `ip` only: no dockerd under `ip netns exec`
        _sh("ip", "netns", "add", self.netns)
        _sh("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_engine)
        _sh("ip", "link", "set", self.veth_engine, "netns", self.netns)
        _sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.veth_host)
        _sh("ip", "link", "set", self.veth_host, "up")
        _sh(*ns, "ip", "addr", "add", f"{self.ip}/24", "dev", self.veth_engine)
        _sh(*ns, "ip", "link", "set", self.veth_engine, "up")
        _sh(*ns, "ip", "link", "set", "lo", "up")
        # Its containers reach servers the tests bind on host_ip.
        _sh(*ns, "ip", "route", "add", "default", "via", self.host_ip)

    def _start_dockerd(self) -> None:
        d = self.dir
        argv = [
            "nsenter",
            f"--net=/var/run/netns/{self.netns}",
            "dockerd",
            "--data-root", str(d / "root"),
            "--exec-root", str(d / "exec"),
            "--pidfile", str(d / "pid"),
            "-H", f"tcp://{self.ip}:{PORT}",
            "-H", f"unix://{d / 'sock'}",
            "--bip", self.bip,
            "--tls=false",
            # Not the host engine's /etc/docker/daemon.json: nothing of its setup applies here.
            "--config-file", str(d / "daemon.json"),
        ]  # fmt: skip
        (d / "daemon.json").write_text("{}\n")
        log = (d / "dockerd.log").open("wb")
        self.process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            start_new_session=True,  # a terminal's Ctrl-C reaches the tests, which stop it
        )
        log.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"second dockerd exited at start: {self.log_tail()}")
            with contextlib.suppress(Exception):
                docker.DockerClient(base_url=self.url, timeout=2).ping()
                return
            time.sleep(0.2)
        raise RuntimeError(f"second dockerd not answering after {READY_TIMEOUT_S:g} s")

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.dir / "dockerd.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop dockerd (and the containerd it started) by pid; delete the namespace and veth."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        # Ctrl-C arriving during the teardown must not leave half of it undone.
        with _signals_deferred():
            self._stop_dockerd()
            self._stop_leftover(self.dir / "exec" / "containerd" / "containerd.pid")
            _sh("ip", "netns", "delete", self.netns, check=False)
            _sh("ip", "link", "delete", self.veth_host, check=False)
            self._remove_dir()

    def _stop_dockerd(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # nsenter execs dockerd: this pid is dockerd's
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def _stop_leftover(self, pid_file: Path) -> None:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def _remove_dir(self) -> None:
        # dockerd unmounts its layers when it stops; a mount left by a killed one goes first.
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        inside = [line.split()[1] for line in mounts if line.split()[1].startswith(str(self.dir))]
        for target in sorted(inside, reverse=True):
            _sh("umount", "-l", target, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield None
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt


@pytest.fixture(scope="session")
def second_engine() -> Iterator[SecondEngine]:
    """A second Docker engine in its own network namespace, reached over TCP: started by the
    first test that asks for it, stopped (and its namespace deleted) when the session ends."""
    with SecondEngine() as engine:
        yield engine


class TwoNodeSwarm:
    """A real swarm of the main engine (manager) and a SecondEngine (worker), made by `with`
    and left by both nodes at the end. Refuses to touch a main engine already in a swarm."""

    def __init__(self, second: SecondEngine, *, heartbeat_s: float | None = None) -> None:
        """`heartbeat_s`: the dispatcher's heartbeat period (Swarm's default is 5 s; a node is
        marked down after about three missed ones)."""
        self.second = second
        self.heartbeat_s = heartbeat_s
        self.main = docker.from_env(timeout=120)
        self.manager_id = ""
        self.worker_id = ""
        self._had_gwbridge = False
        self._joined = False
        self.before: set[str] = set()
        """Volumes the main engine had before the test (`prepared_swarm`)."""

    def __enter__(self) -> TwoNodeSwarm:
        state = self.main.info()["Swarm"]["LocalNodeState"]
        if state != "inactive" and self._left_by_a_test():
            self._leave_main()
            state = self.main.info()["Swarm"]["LocalNodeState"]
        if state != "inactive":
            raise RuntimeError(
                f"the main Docker engine is in a swarm already ({state}); not touching it"
            )
        self._had_gwbridge = bool(self.main.networks.list(names=["docker_gwbridge"]))
        host_ip = self.second.host_ip
        options: dict[str, int] = {}
        if self.heartbeat_s is not None:
            options["dispatcher_heartbeat_period"] = int(self.heartbeat_s * 1e9)
        self.main.swarm.init(
            advertise_addr=host_ip,
            listen_addr=f"{host_ip}:2377",
            labels={SWARM_LABEL: "1"},
            **options,
        )
        try:
            self._join()
        except BaseException:
            self.leave()
            raise
        return self

    def _join(self) -> None:
        token = self.main.swarm.attrs["JoinTokens"]["Worker"]
        worker = self.second.client()
        worker.swarm.join(
            remote_addrs=[f"{self.second.host_ip}:2377"],
            join_token=token,
            advertise_addr=self.second.ip,
            listen_addr=f"{self.second.ip}:2377",
        )
        self._joined = True
        self.manager_id = self.main.info()["Swarm"]["NodeID"]
        self.worker_id = worker.info()["Swarm"]["NodeID"]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            nodes = self.main.nodes.list()
            if len(nodes) == 2 and all(n.attrs["Status"]["State"] == "ready" for n in nodes):
                return
            time.sleep(0.2)
        raise RuntimeError("the second engine's node did not become ready in the swarm")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave()

    def _left_by_a_test(self) -> bool:
        """Whether the main engine's swarm is one a TwoNodeSwarm made (and could not leave)."""
        with contextlib.suppress(docker.errors.APIError):
            self.main.swarm.reload()
            return (self.main.swarm.attrs.get("Spec", {}).get("Labels") or {}).get(
                SWARM_LABEL
            ) == "1"
        return False

    def _leave_main(self) -> None:
        """The main engine leaves, retried while it refuses: with a node just lost, the manager
        may answer "context deadline exceeded" for a while."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(docker.errors.APIError):
                self.main.swarm.leave(force=True)
            state = self.main.info()["Swarm"]["LocalNodeState"]
            if state == "inactive":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the main Docker engine did not leave its swarm ({state})")
            time.sleep(1)

    def leave(self) -> None:
        """Both nodes leave (services go with the swarm); the gateway bridge the swarm made on
        the main engine is removed when nothing uses it."""
        with _signals_deferred():
            if self._joined:
                # The second engine may be dead (a test killed it): the main one leaves anyway.
                with contextlib.suppress(docker.errors.DockerException, OSError):
                    self.second.client(timeout=10).swarm.leave(force=True)
            self._leave_main()
            if not self._had_gwbridge:
                for network in self.main.networks.list(names=["docker_gwbridge"]):
                    network.reload()
                    if not network.attrs.get("Containers"):
                        with contextlib.suppress(docker.errors.APIError):
                            network.remove()


@pytest.fixture
def two_node_swarm(second_engine: SecondEngine) -> Iterator[TwoNodeSwarm]:
    """The main engine (manager) and the second engine (worker) in one swarm, left by both
    nodes when the test ends."""
    with TwoNodeSwarm(second_engine) as swarm:
        yield swarm


class StartedContainers:
    """The ids of the containers an engine starts while the `with` block runs, from its live
    event stream (`docker events --since` reads a bounded buffer of past events: a busy run
    overflows it).

    The stream is known to be live, and at the end to have delivered everything, by a volume
    the block makes for the purpose and sees created on the stream (events arrive in order)."""

    def __init__(self, url: str | None = None) -> None:
        self._docker = ["docker", *(["-H", url] if url else [])]
        self._argv = [*self._docker, "events", "--filter", "type=container"]
        self._argv += ["--filter", "type=volume", "--filter", "event=start"]
        self._argv += [
            "--filter",
            "event=create",
            "--format",
            "{{.Type}} {{.Action}} {{.Actor.ID}}",
        ]
        self.ids: set[str] = set()
        self._volumes: set[str] = set()
        self._seen = threading.Condition()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> StartedContainers:
        self._process = subprocess.Popen(
            self._argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            # A volume made before the stream is subscribed is never seen: make another.
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not self._mark(wait_s=1.0):
                if time.monotonic() > deadline:
                    raise RuntimeError("`docker events` never showed a volume made to test it")
        except BaseException:
            self._stop()
            raise
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            kind, action, actor = [*line.split(), "", "", ""][:3]
            with self._seen:
                if kind == "container" and action == "start":
                    self.ids.add(actor)
                elif kind == "volume" and action == "create":
                    self._volumes.add(actor)
                self._seen.notify_all()

    def _mark(self, wait_s: float) -> bool:
        """Make a volume and wait up to `wait_s` for the stream to show it."""
        name = f"fks-events-{uuid.uuid4().hex[:12]}"
        _sh(*self._docker, "volume", "create", name)
        try:
            with self._seen:
                return self._seen.wait_for(lambda: name in self._volumes, timeout=wait_s)
        finally:
            _sh(*self._docker, "volume", "rm", "-f", name, check=False)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None and not self._mark(wait_s=READY_TIMEOUT_S):
                raise RuntimeError("`docker events` stopped before the block's last events")
        finally:
            self._stop()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=30)


def prepared_swarm(swarm: TwoNodeSwarm, *images: str) -> TwoNodeSwarm:
    """`swarm` with `images` (fks's: the agent's and the proxy's) on the worker, and the
    worker's engine socket on its node label (its engine does not listen at
    /var/run/docker.sock: the main engine does); what volumes the main engine had noted."""
    from fks_testing.helpers import fks

    second = swarm.second
    wanted = [arg for image in images for arg in ("--image", image)]
    pushed = fks("image", "push", "--engine", second.url, *wanted, timeout=300)
    assert pushed.code == 0, pushed.output
    node = swarm.main.nodes.get(swarm.worker_id)
    spec = node.attrs["Spec"]
    spec["Labels"] = {**(spec.get("Labels") or {}), LABEL_SOCKET: str(second.dir / "sock")}
    node.update(spec)
    swarm.before = {v.name for v in swarm.main.volumes.list()}
    return swarm


def of_test(labels: dict[str, str] | None, mine: Path) -> bool:
    """Made for a repository under `mine` (the test's tmp_path): the main engine also runs
    other tests' sandboxes (some without a repository), which are theirs to check."""
    repo = (labels or {}).get(LABEL_REPO)
    return repo is not None and Path(repo).is_relative_to(mine.resolve())


def leftovers(
    swarm: TwoNodeSwarm, mine: Path, run: str | None = None, *, settle_s: float = 30
) -> dict[str, list[str]]:
    """fks's services, secrets, networks, containers and volumes on either node (but what was
    there before), of the repositories under `mine` (and of run `run` only, when given: the
    main engine runs other tests' sandboxes too). A node removes the containers of a removed
    service a few seconds later (a task on an overlay network takes ~6 s), and a manager
    removes a network fks removed once the last of those has left it: what is left is looked
    at again for up to `settle_s`."""
    deadline = time.monotonic() + settle_s
    while (found := _leftovers(swarm, mine, run)) and time.monotonic() < deadline:
        if set(found) - {"main containers", "second containers", "networks"}:
            return found  # fks's own removals are done before the run ends
        time.sleep(0.5)
    return found


def _leftovers(swarm: TwoNodeSwarm, mine: Path, run: str | None) -> dict[str, list[str]]:
    main, second = swarm.main, swarm.second.client()
    label = {"label": LABEL_RUN if run is None else f"{LABEL_RUN}={run}"}
    found = {
        "services": [s.name for s in main.services.list(filters=label)],
        "secrets": [s.name for s in main.secrets.list(filters=label)],
        "networks": [n.name for n in main.networks.list(filters=label)],
    }
    for name, client in (("main", main), ("second", second)):
        found[f"{name} containers"] = [
            c.name
            # ignore_removed: other tests' containers come and go while it is listed
            for c in client.containers.list(all=True, filters=label, ignore_removed=True)
            if of_test(c.labels, mine)
        ]
        found[f"{name} volumes"] = [
            v.name
            for v in client.volumes.list(**({} if run is None else {"filters": label}))
            if "fks-" in v.name
            and v.name not in swarm.before
            and of_test(v.attrs.get("Labels"), mine)
        ]
    return {k: v for k, v in found.items() if v}
