"""Sandbox settings checked before anything starts (by `fks run`, `--dry-run` and `fks validate`).

Static checks need only the settings and the file system; engine checks ask Docker (the CPUs
it has; whether each agent command exists in its image, asked once per image id and cached).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_runner.errors import AgentNotFoundError, ConfigError, SandboxError
from sandbox_runner.plan.config import SandboxSettings

if TYPE_CHECKING:
    import docker

MIN_MEMORY_BYTES = 64 * 2**20
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


def check_engine(client: docker.DockerClient, settings: SandboxSettings, where: str) -> None:
    """Limits the engine can honour."""
    if settings.cpus is not None:
        available = int(client.info().get("NCPU") or 0)
        if available and settings.cpus > available:
            raise ConfigError(
                f"{where}.cpus: {settings.cpus:g} is more than the {available} CPUs the Docker "
                f"engine has; give at most {available}"
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
            labels={"fks.probe": "1"},
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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(path: Path, data: dict[str, dict[str, bool]]) -> None:
    from sandbox_runner.records.store import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data))
    except OSError:
        pass  # a cache we cannot write is only slower next time
