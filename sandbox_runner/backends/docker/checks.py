"""Sandbox settings checked before anything starts (by `fks run`, `--dry-run` and `fks validate`).

Static checks need only the settings and the file system; engine checks ask Docker (the CPUs
it has; whether each agent command exists in its image, asked once per image id and cached).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sandbox_runner.backends.docker.egress.upstream import API_KINDS, api_kinds, upstreams_for
from sandbox_runner.backends.docker.settings import config_files
from sandbox_runner.bounded import load_json
from sandbox_runner.errors import AgentNotFoundError, ConfigError, SandboxError
from sandbox_runner.labels import LABEL_PROBE
from sandbox_runner.paths import write_atomic
from sandbox_runner.plan.checks import did_you_mean
from sandbox_runner.plan.sandbox import SandboxSettings, own_network

if TYPE_CHECKING:
    import docker

    from sandbox_runner.plan.agents import AgentCommand

MIN_MEMORY_BYTES = 64 * 2**20
_CACHE_BYTES = 1 << 20  # bytes of the image-agents cache read at most
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([bkmg]?)$", re.IGNORECASE)


def memory_bytes(text: str) -> int | None:
    """Docker's size syntax (`512m`, `2g`, `1073741824`) in bytes; None if it is not one."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def check_static(settings: SandboxSettings, where: str) -> None:
    """Memory at or above the minimum; extra mounts absolute paths that exist."""
    if settings.memory is not None:
        size = memory_bytes(settings.memory)
        if size is None or size < MIN_MEMORY_BYTES:
            raise ConfigError(
                f"{where}.memory: '{settings.memory}' is below the minimum of 64m an agent "
                'needs; give e.g. "2g"'
            )
    for i, mount in enumerate(settings.mounts):
        if not Path(mount).is_absolute():
            raise ConfigError(
                f"{where}.mounts[{i}]: '{mount}' is not an absolute path; give the full path"
            )
        if not Path(mount).exists():
            raise ConfigError(
                f"{where}.mounts[{i}]: {mount} does not exist; create it or remove it"
            )


GVISOR_ARGS = ("--network=host", "--host-uds=open")
"""The runsc flags fks's containers need: the network namespace Docker gives a container is
the sandbox's (its loopback where a step's containers meet its egress forwarders), and a Unix
socket in a mounted volume can be connected to (the egress proxy's)."""
GVISOR_REGISTRATION = (
    '"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": '
    '["--network=host", "--host-uds=open"]}} in /etc/docker/daemon.json, then reload the engine '
    "(kill -HUP $(cat /var/run/docker.pid))"
)


def gvisor_runtimes(runtimes: Mapping[str, Any]) -> frozenset[str]:
    """The names under which the engine (`docker info`, Runtimes) has gVisor's runsc."""
    found = set()
    for name, entry in runtimes.items():
        entry = entry if isinstance(entry, dict) else {}
        shim = str(entry.get("runtimeType", ""))
        if Path(str(entry.get("path", ""))).name == "runsc" or "runsc" in shim:
            found.add(name)
    return frozenset(found)


def check_engine(client: docker.DockerClient, settings: SandboxSettings, where: str) -> None:
    """Limits the engine can honour; the runtime is one it has; a Docker network of the
    user's exists on it."""
    network = own_network(settings.network)
    if network is not None and not client.networks.list(names=[network]):
        raise ConfigError(
            f"{where}.network: the Docker engine has no network '{network}'; use allowlist (the "
            "default: only allowed hosts, through fks's egress proxy), open or none, or create "
            f"it (docker network create {network}: the agent then gets that network as it is, "
            "without the egress proxy)"
        )
    if settings.runtime is not None:
        check_runtime(client.info().get("Runtimes") or {}, settings.runtime, where)
    if settings.cpus is not None:
        available = int(client.info().get("NCPU") or 0)
        if available and settings.cpus > available:
            raise ConfigError(
                f"{where}.cpus: {settings.cpus:g} is more than the {available} CPUs the Docker "
                f"engine has; give at most {available}"
            )


def check_runtime(runtimes: dict[str, Any], runtime: str, where: str) -> None:
    """`runtime` is one of the engine's `runtimes` (`docker info`); gVisor's with the flags
    fks's containers need."""
    if runtime not in runtimes:
        has = ", ".join(sorted(runtimes)) or "none listed"
        how = (
            "install gVisor (Debian: apt-get install runsc, from bookworm-backports on Debian "
            f"12) and register it: {GVISOR_REGISTRATION}"
            if "runsc" in runtime
            else 'register it in the engine\'s /etc/docker/daemon.json "runtimes" or choose one it has'
        )
        hint = did_you_mean(runtime, runtimes)
        raise ConfigError(
            f"{where}.runtime: the Docker engine has no runtime '{runtime}'{hint} "
            f"(it has: {has}); {how}"
        )
    entry = runtimes[runtime] if isinstance(runtimes[runtime], dict) else {}
    args = {str(arg) for arg in entry.get("runtimeArgs") or ()}
    if "--host-uds=all" in args:  # `all` is `open` and `create`
        args.add("--host-uds=open")
    missing = [flag for flag in GVISOR_ARGS if flag not in args]
    if Path(str(entry.get("path", ""))).name == "runsc" and missing:
        raise ConfigError(
            f"{where}.runtime: the engine's runtime '{runtime}' (gVisor) runs without "
            f"{' '.join(missing)}, which fks's containers need; register it as "
            f"{GVISOR_REGISTRATION}"
        )


def check_api_url(url: str | None, *, network: str, variable: str = "ANTHROPIC_BASE_URL") -> None:
    """A model API at `url` (`variable`'s value; None: the public API) can be reached by a
    step in a container on the local engine with Docker network `network` (`none`:
    through the egress proxy, which is on the default bridge): a loopback address is the
    container's own (or the proxy's) unless the container shares the host's network."""
    if not url or network == "host":
        return
    parts = urlsplit(url)
    if parts.hostname is None or not is_loopback(parts.hostname):
        return
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    raise SandboxError(
        f"{variable} {url} is this machine's loopback, which in the sandbox is the "
        f"container itself; use {parts.scheme}://host.docker.internal{port}{parts.path} and "
        "have the API "
        "listen on an address containers reach (e.g. 0.0.0.0)"
    )


def is_loopback(host: str) -> bool:
    """`host` (a URL's host, brackets removed) names this machine's loopback or any address:
    localhost and its subdomains, 127/8, ::1, IPv4-mapped ones, 0.0.0.0, ::, and the short
    and numeric IPv4 forms clients accept (127.1, 2130706433, 0x7f.1)."""
    name = host.strip("[]").lower().removesuffix(".")
    if name in ("localhost", "ip6-localhost", "ip6-loopback") or name.endswith(".localhost"):
        return True
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(name)
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except (OSError, ValueError):
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def check_off_machine(
    engine: str, settings: SandboxSettings, where: str, agent: AgentCommand
) -> None:
    """What a step cannot have on `engine`, which is not this machine's: this machine's paths
    (mounts, a Claude config file), a model API on this machine."""
    if settings.mounts:
        raise SandboxError(
            f"{where}.mounts: engine {engine} cannot see this machine's paths "
            f"({settings.mounts[0]}); remove sandbox.mounts or run on the local engine"
        )
    if files := config_files(agent):
        raise SandboxError(
            f"agent '{agent.name}': its Claude config file {files[0]} would be mounted from "
            f"this machine, which engine {engine} cannot see; run it on the local engine"
        )
    for api in upstreams_for(api_kinds(agent, settings), os.environ):
        if is_loopback(api.host):
            raise SandboxError(
                f"{API_KINDS[api.kind].base_url_var} {api.url} is on this machine, which "
                f"containers on engine {engine} cannot reach; give an address that engine reaches"
            )


def check_agents_in_image(client: docker.DockerClient, image: str, programs: Iterable[str]) -> None:
    """Every bare agent command exists in `image` (asked once per image id, then cached)."""
    wanted = sorted({p for p in programs if "/" not in p})
    if not wanted:
        return
    image_id = str(client.images.get(image).id)
    cache = _cache_file()
    known = _load_cache(cache).get(image_id, {})
    unknown = [p for p in wanted if p not in known]
    if unknown:
        known.update(_probe(client, image, unknown))
        data = _load_cache(cache)
        data[image_id] = known
        _save_cache(cache, data)
    missing = [p for p in wanted if not known.get(p)]
    if missing:
        raise AgentNotFoundError(
            f"Agent '{missing[0]}' not found in the image {image} (not on its PATH); install it "
            "in the image or give a path in the repository"
        )


def _probe(client: docker.DockerClient, image: str, programs: list[str]) -> dict[str, bool]:
    import docker.errors

    script = 'for p; do command -v "$p" >/dev/null 2>&1 && echo "$p"; done; true'
    try:
        out = client.containers.run(
            image,
            ["sh", "-c", script, "fks-probe", *programs],
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            remove=True,
            labels={LABEL_PROBE: "1"},
        )
    except docker.errors.DockerException as exc:
        raise SandboxError(f"could not look for the agents in image {image}: {exc}") from None
    found = set(out.decode("utf-8", "replace").split())
    return {p: p in found for p in programs}


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fks" / "image-agents.json"


def _load_cache(path: Path) -> dict[str, dict[str, bool]]:
    try:
        with path.open("rb") as handle:
            data = load_json(handle.read(_CACHE_BYTES + 1), max_bytes=_CACHE_BYTES)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(path: Path, data: dict[str, dict[str, bool]]) -> None:

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data))
    except OSError:
        pass  # a cache we cannot write is only slower next time
