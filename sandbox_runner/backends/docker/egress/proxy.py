"""Egress control for Docker sandboxes: the agent container has no network at all and reaches
allow-listed hosts only through Squid in a separate proxy container, over Unix sockets in a
shared volume. The model API is reached through the same proxy, which adds the credential.

Only sockets cross the volume; the Squid config (with the real credential) is copied into the
proxy container, which the agent can neither see nor reach except through Squid.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from sandbox_runner.backends.docker.egress.container import container_kwargs, in_thread, wait_ready

# SETTLE_S is named with the proxy where its traffic is taken.
from sandbox_runner.backends.docker.egress.followed_log import SETTLE_S as SETTLE_S
from sandbox_runner.backends.docker.egress.followed_log import FollowedLog
from sandbox_runner.backends.docker.egress.glue import (
    CA_BUNDLE,
    CA_VARIABLES,
    RUN_CA,
    SOCKET_DIR,
    SQUID_CONF,
    Glue,
    agent_script,
    proxy_script,
    proxy_sockets,
    wait_script,
)
from sandbox_runner.backends.docker.egress.metering import (
    METER_BUDGET,
    METER_PORT,
    Metered,
    budget_text,
    meter_files,
)
from sandbox_runner.backends.docker.egress.squid import FORWARD_PORT, ORIGIN_CAS, squid_config
from sandbox_runner.backends.docker.egress.upstream import PLACEHOLDER as PLACEHOLDER
from sandbox_runner.backends.docker.egress.upstream import ApiUpstream, agent_env
from sandbox_runner.backends.docker.engine.client import create_container, with_retries
from sandbox_runner.errors import SandboxError
from sandbox_runner.images.lookup import DEFAULT_PROXY_IMAGE
from sandbox_runner.labels import LABEL_PID, LABEL_ROLE, LABEL_RUN
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.secrets import PLACEHOLDER as SECRET_PLACEHOLDER
from sandbox_runner.signals import deferred_signals

if TYPE_CHECKING:
    import docker

    from sandbox_runner.plan.secrets import Secret

PROXY_ROLE = "egress-proxy"  # label fks.role of its container and its socket volume

# --- The proxy container ------------------------------------------------------------------------


class EgressProxy(FollowedLog):
    """The proxy container and its socket volume for one run, as a `with` block.

    Inside it, an agent container is started with `network_mode="none"`, `mount()` among its
    mounts, `env()` in its environment and `wrap_argv(argv)` as its command. Leaving the block
    removes the container and the volume (on success, error and Ctrl-C alike); agent
    containers must be gone by then.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        run_id: str,
        allow: Sequence[AllowEntry],
        api: ApiUpstream | None = None,
        apis: Sequence[ApiUpstream] = (),
        deny: Sequence[AllowEntry] = (),
        secrets: Sequence[Secret] = (),
        origin_cas: str = "",
        meter: bool = False,
        prices: Sequence[tuple[str, float, float]] = (),
        labels: Mapping[str, str] | None = None,
        image: str = DEFAULT_PROXY_IMAGE,
        network: str = "bridge",
        extra_hosts: Mapping[str, str] | None = None,
        ready_timeout: float = 15.0,
        ready_later: bool = False,
    ) -> None:
        """`ready_later`: entering starts the proxy without waiting for it; `ready()` waits,
        and an agent's container waits for `awaited_sockets()` before its agent starts."""
        super().__init__()
        self._client = client
        self._allow = tuple(allow)
        # One per kind: the first given of each.
        given = [*([api] if api is not None else []), *apis]
        self._apis = tuple({a.kind: a for a in reversed(given)}.values())[::-1]
        self._deny = tuple(deny)
        self._secrets = tuple(secrets)
        self._origin_cas = origin_cas
        self._run_id = re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)[:60]
        kinds = tuple(a.kind for a in self._apis)
        self._glue = Glue(apis=kinds, ca=bool(secrets), meter=meter and bool(kinds))
        self._iterations = 0
        self._prices = tuple(prices)
        self._image = image
        self._network = network
        self._extra_hosts = dict(extra_hosts or {})
        # mitmproxy reads hundreds of files as it starts: a minute or more on a busy disk.
        self._ready_timeout = max(ready_timeout, 180.0) if self._glue.meter else ready_timeout
        self._labels = {
            **(labels or {}),
            LABEL_RUN: run_id,
            LABEL_PID: str(os.getpid()),
            LABEL_ROLE: PROXY_ROLE,
        }
        safe_run = re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)[:40]
        self.volume_name = f"fks-egress-{safe_run}-{uuid.uuid4().hex[:8]}"
        self._volume: Any = None
        self._container: Any = None
        self._ready_later = ready_later
        self._starting = False
        """Started with `ready_later`, not known to be ready yet."""
        self._launch: Future[None] | None = None
        """With `ready_later`: the container made, configured and started in a thread."""
        self._budget_lock = threading.Lock()
        self._first_budget = budget_text(0, None)
        self._configured = False
        self.startup_seconds: float | None = None
        """How long `__enter__` took, volume to ready."""
        self.removal_seconds: float | None = None
        """How long `__exit__` took."""

    def __enter__(self) -> Self:
        started = time.monotonic()
        try:
            self._start()
        except BaseException:
            self._remove(quiet=True)
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _start(self) -> None:
        """Volume, container, config, ready, and the access log followed (with `ready_later`,
        the container in a thread and the rest in `ready`: beside the step's first container)."""
        self._volume = with_retries(
            "volume create",
            lambda: self._client.volumes.create(self.volume_name, labels=self._labels),
        )
        if self._ready_later:
            self._starting = True
            self._launch = in_thread(self._launch_container, "fks-egress-start")
            return
        self._launch_container()
        self._wait_ready()
        self._follow_in_thread()

    def _launch_container(self) -> None:
        self._container = self._create_container()
        with self._budget_lock:
            self._container.put_archive("/etc", self._config_tar())
            self._configured = True
        with_retries("start", self._container.start)

    def ready(self) -> None:
        """Until the proxy is ready (at once unless it was entered with `ready_later`); an error
        naming its output if it cannot start."""
        if self._starting:
            if self._launch is not None:
                self._launch.result()
            self._wait_ready()
            self._starting = False
            self._follow_in_thread()

    def awaited_sockets(self) -> tuple[str, ...]:
        """The sockets an agent's container waits for before its agent starts: the proxy's
        own, while it may still be starting."""
        return proxy_sockets(self._glue) if self._starting else ()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        started = time.monotonic()
        self._remove(quiet=exc_type is not None)
        self.removal_seconds = time.monotonic() - started

    def mount(self) -> Any:
        """The socket volume, read-only, for the agent container (a docker-py Mount)."""
        from docker.types import Mount

        return Mount(
            target=SOCKET_DIR, source=self.volume_name, type="volume", read_only=True, no_copy=True
        )

    def env(self) -> dict[str, str]:
        """The agent's proxy variables, and for each model API its base URL and placeholder
        credential (`upstream.agent_env`)."""
        return agent_proxy_env(self._apis, self._glue.ca, self._secrets)

    @property
    def secret_variables(self) -> frozenset[str]:
        """Variables of fks's environment that are secrets' sources: never the agent's."""
        return frozenset(s.env for s in self._secrets if s.env is not None)

    def wrap_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` run after the in-container forwarders listen (`sh -c '…; exec "$@"' sh argv…`)."""
        return ["sh", "-c", agent_script(self._glue), "sh", *argv]

    def wait_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` run once the forwarders of the network namespace it joined listen (started by
        the namespace's holder with `wrap_argv`)."""
        return ["sh", "-c", wait_script(self._glue), "sh", *argv]

    def _config_files(self) -> dict[str, str]:
        """squid.conf and, with sandbox.caCerts, the CAs Squid trusts for origins: path -> text."""
        config = squid_config(
            self._allow,
            self._apis,
            deny=self._deny,
            secrets=self._secrets,
            origin_cas=bool(self._origin_cas),
            meter_port=METER_PORT if self._glue.meter else None,
        )
        files = {SQUID_CONF: config}
        if self._glue.meter:
            files |= meter_files(self._apis, self._prices)
            files |= {METER_BUDGET: self._first_budget}
        return files | ({ORIGIN_CAS: self._origin_cas} if self._origin_cas else {})

    @property
    def metering(self) -> bool:
        """Whether the meter reads the model APIs' responses (and holds a budget)."""
        return self._glue.meter

    def open_iteration(self, left: float | None) -> int:
        """An iteration begins that may spend `left` (None: no limit) at the model APIs: the
        meter's spend starts from nothing. Its number, for `metered` and `spends.watch`."""
        self._iterations += 1
        number = self._iterations
        self.spends.watch(number, None)
        text = budget_text(number, left)
        with self._budget_lock:
            if not self._configured:  # the container is being made: it gets it with the config
                self._first_budget = text
                return number
        tar = _files_tar({METER_BUDGET.removeprefix("/etc/"): text})
        with_retries("put budget", lambda: self._container.put_archive("/etc", tar))
        return number

    def metered(self, number: int) -> Metered:
        """What the meter counted of iteration `number` so far."""
        return self.spends.of(number)

    def _config_tar(self) -> bytes:
        """The config files, into /etc."""
        files = self._config_files()
        return _files_tar({name.removeprefix("/etc/"): text for name, text in files.items()})

    def _running(self) -> bool:
        """Entered and not left (its container may still be starting: it has no traffic)."""
        return self._container is not None or self._starting

    def _open_log(self) -> Any:
        return self._container.logs(stdout=True, stderr=False, stream=True, follow=True)

    def _create_container(self) -> Any:
        script = proxy_script(self._glue, self._run_id)
        kwargs = container_kwargs(self._image, script, self._labels, self.volume_name)
        kwargs |= {"extra_hosts": self._extra_hosts}
        if self._network in ("bridge", "host"):
            kwargs["network_mode"] = self._network
        else:
            kwargs["network"] = self._network
        return create_container(self._client, kwargs, what="the egress proxy container")

    def _wait_ready(self) -> None:
        wait_ready(self._container, self._image, self._ready_timeout)

    def _remove(self, *, quiet: bool) -> None:
        """Container, then volume; a volume still in use (an agent container left running)
        is an error unless `quiet` (another error is on its way up)."""
        import docker.errors

        with deferred_signals():
            if self._launch is not None:
                self._launch.exception()  # until the thread is done with the container
            self._close_log()
            if self._container is not None:
                with contextlib.suppress(docker.errors.NotFound):
                    with_retries("remove", lambda: self._container.remove(force=True))
                self._container = None
            if self._volume is not None:
                volume, self._volume = self._volume, None
                try:
                    with_retries("volume remove", lambda: volume.remove(force=True))
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    if not quiet:
                        raise SandboxError(
                            f"Could not remove the egress proxy's volume {self.volume_name}: "
                            f"{exc.explanation or exc}; remove its agent containers first"
                        ) from None


def agent_proxy_env(
    apis: Sequence[ApiUpstream], ca: bool, secrets: Sequence[Secret]
) -> dict[str, str]:
    """See `EgressProxy.env`."""
    proxy = f"http://127.0.0.1:{FORWARD_PORT}"
    env = dict.fromkeys(("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"), proxy)
    env |= {"NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}
    for upstream in apis:
        env |= agent_env(upstream)
    if ca:
        env |= dict.fromkeys(CA_VARIABLES, CA_BUNDLE) | {"NODE_EXTRA_CA_CERTS": RUN_CA}
    env |= {s.env: SECRET_PLACEHOLDER for s in secrets if s.env is not None}
    return env


def _files_tar(files: Mapping[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
