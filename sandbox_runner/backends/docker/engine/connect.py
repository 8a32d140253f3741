"""A `sandbox.engine` / `--engine` value turned into a connected docker-py client: this
machine's engine, or another one (`tcp://`, `ssh://`, a Docker CLI context).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.bounded import load_json
from sandbox_runner.docker_daemon import docker_client, one_line, root_cause
from sandbox_runner.errors import SandboxError
from sandbox_runner.plan.engine import EngineSpec

if TYPE_CHECKING:
    import docker

# A remote engine that does not answer a ping in this long is reported as unreachable.
CONNECT_TIMEOUT_S = 15
_META_BYTES = 1 << 20  # bytes of a Docker context's meta.json read at most


def supported_engine(engine: str | None) -> EngineSpec | None:
    """The engine runs use: None for the local one (what runs cannot use there, the target
    made of it refuses: `targets.target_for`)."""
    spec = EngineSpec.parse(engine) if engine is not None else None
    if spec is None or spec.is_local:
        return None
    return spec


def engine_client(spec: EngineSpec, *, timeout: int = 60) -> docker.DockerClient:
    """A client of the engine `spec` names, pinged; SandboxError in one line when it cannot be
    reached. A spec with no URL and no context names this machine's engine."""
    if spec.url is None and spec.context is None:
        return docker_client(timeout=timeout)
    kwargs = _context_kwargs(spec.context) if spec.context else _url_kwargs(spec.url or "")
    return _connected(spec, kwargs, timeout=timeout)


def _url_kwargs(url: str) -> dict[str, Any]:
    """tcp:// with the TLS the usual variables ask for; ssh:// through the `ssh` program (so
    that ~/.ssh/config, agents and known_hosts apply as for the Docker CLI)."""
    import docker

    if url.startswith("ssh://"):
        return {"base_url": url, "use_ssh_client": True}
    environment = {**os.environ, "DOCKER_HOST": url}
    if environment.get("DOCKER_TLS_VERIFY") or environment.get("DOCKER_CERT_PATH"):
        cert_dir = Path(environment.get("DOCKER_CERT_PATH") or Path.home() / ".docker")
        missing = [n for n in ("ca.pem", "cert.pem", "key.pem") if not (cert_dir / n).is_file()]
        if missing:
            raise SandboxError(
                f"engine {url}: DOCKER_TLS_VERIFY/DOCKER_CERT_PATH ask for TLS but {cert_dir} has "
                f"no {', '.join(missing)}; set DOCKER_CERT_PATH to the directory with ca.pem, "
                "cert.pem and key.pem"
            )
    kwargs: dict[str, Any] = docker.utils.kwargs_from_env(environment=environment)
    return kwargs


def _context_kwargs(name: str) -> dict[str, Any]:
    """The endpoint of Docker CLI context `name`, from its store (`~/.docker/contexts`)."""
    import docker

    contexts = _config_dir() / "contexts"
    meta, store_dir = _find_context(contexts / "meta", name)
    endpoint = meta.get("Endpoints", {}).get("docker", {})
    host = endpoint.get("Host")
    if not isinstance(host, str) or not host:
        raise SandboxError(
            f"Docker context {name!r} has no Docker endpoint (Endpoints.docker.Host)"
        )
    if host.startswith("ssh://"):
        return {"base_url": host, "use_ssh_client": True}
    tls_dir = contexts / "tls" / store_dir / "docker"
    if not tls_dir.is_dir():
        return {"base_url": host}
    files = {name: tls_dir / f"{name}.pem" for name in ("ca", "cert", "key")}
    tls = docker.tls.TLSConfig(
        client_cert=(str(files["cert"]), str(files["key"])) if files["cert"].is_file() else None,
        ca_cert=str(files["ca"]) if files["ca"].is_file() else None,
        verify=not endpoint.get("SkipTLSVerify", False),
    )
    return {"base_url": host, "tls": tls}


def _config_dir() -> Path:
    configured = os.environ.get("DOCKER_CONFIG")
    return Path(configured) if configured else Path.home() / ".docker"


def _find_context(meta_dir: Path, name: str) -> tuple[dict[str, Any], str]:
    """The meta.json of context `name` and the name of its directory in the store (a hash of
    the context's name, the same under `tls/`)."""
    for path in sorted(meta_dir.glob("*/meta.json")):
        try:
            with path.open("rb") as handle:
                meta = load_json(handle.read(_META_BYTES + 1), max_bytes=_META_BYTES)
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("Name") == name:
            return meta, path.parent.name
    raise SandboxError(
        f"Docker context {name!r} not found in {meta_dir}; list them with 'docker context ls'"
    )


def _connected(spec: EngineSpec, kwargs: dict[str, Any], *, timeout: int) -> docker.DockerClient:
    import importlib.util

    import docker

    if kwargs.get("use_ssh_client") and importlib.util.find_spec("paramiko") is None:
        raise SandboxError(
            f"engine {spec}: ssh:// engines need the paramiko package (docker-py loads it even "
            "to use the ssh program); install it with 'pip install paramiko'"
        )

    try:
        client = docker.DockerClient(timeout=CONNECT_TIMEOUT_S, **kwargs)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(_unreachable(spec, kwargs["base_url"], exc)) from None
    except OSError as exc:  # the ssh program missing, a socket error outside requests
        raise SandboxError(_unreachable(spec, kwargs["base_url"], exc)) from None
    client.api.timeout = timeout
    if str(kwargs["base_url"]).startswith("tcp://") and not kwargs.get("tls"):
        _warn_plain_tcp(str(spec))
    return client


_warned: set[str] = set()


def _warn_plain_tcp(engine: str) -> None:
    """Once per engine and process: a Docker API on plain TCP is root on its machine for
    anyone who reaches the port (an agent on a node included)."""
    if engine in _warned:
        return
    _warned.add(engine)
    print(
        f"fks: warning: engine {engine} is plain TCP without TLS (DOCKER_TLS_VERIFY is not "
        "set): anyone who reaches that port is root on its machine; use TLS "
        "(DOCKER_TLS_VERIFY=1, DOCKER_CERT_PATH) or ssh://USER@HOST",
        file=sys.stderr,
        flush=True,
    )


def _unreachable(spec: EngineSpec, url: str, exc: BaseException) -> str:
    shown = str(spec) if str(spec) == url else f"{spec} ({url})"
    return (
        f"Docker engine {shown} not reachable: {one_line(root_cause(exc))}; check that it runs "
        "and listens there (e.g. 'docker -H URL info')"
    )
