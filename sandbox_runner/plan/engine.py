"""Which Docker engine a sandbox runs on (`sandbox.engine`, `--engine`): parsed and checked
before anything is started. Connecting to it is `backends/docker/engine/connect.py`'s job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from sandbox_runner.errors import FksError

EngineKind = Literal["local", "tcp", "ssh", "context", "swarm"]
LOCAL = "local"
_FORMS = "local, tcp://HOST:PORT, ssh://USER@HOST, context:NAME, swarm or swarm:URL"
# The names the Docker CLI accepts for a context.
_CONTEXT_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.+-]*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


class EngineSpecError(FksError, ValueError):
    """A `sandbox.engine` / `--engine` value that is none of the known forms (a ValueError for
    pydantic)."""


@dataclass(frozen=True)
class EngineSpec:
    """A parsed engine: `url` is set for tcp/ssh (and a swarm managed elsewhere), `context` for
    `context:NAME`; `local` and `swarm` use the engine of DOCKER_HOST / the current context."""

    kind: EngineKind
    text: str
    url: str | None = None
    context: str | None = None

    @classmethod
    def parse(cls, text: str) -> EngineSpec:
        """EngineSpecError naming the value and the forms it may take when it is none of them."""
        value = text.strip()
        if value in (LOCAL, "swarm"):
            return cls("local" if value == LOCAL else "swarm", value)
        if value.startswith("context:"):
            name = value.removeprefix("context:")
            if not _CONTEXT_NAME.fullmatch(name):
                raise EngineSpecError(f"{text!r}: {name!r} is not a Docker context name")
            return cls("context", value, context=name)
        if value.startswith("swarm:"):
            url = value.removeprefix("swarm:")
            return cls("swarm", value, url=_checked_url(url, text))
        url = _checked_url(value, text)
        return cls("tcp" if url.startswith("tcp://") else "ssh", value, url=url)

    @property
    def is_local(self) -> bool:
        return self.kind == "local"

    def __str__(self) -> str:
        return self.text


def _checked_url(url: str, text: str) -> str:
    """`tcp://HOST:PORT` or `ssh://[USER@]HOST[:PORT]`, else EngineSpecError."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in ("tcp", "ssh"):
        raise EngineSpecError(f"{text!r} is not one of: {_FORMS}")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise EngineSpecError(f"{text!r}: the port must be 1-65535") from None
    host = parts.hostname or ""
    if not _HOST.fullmatch(host) or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EngineSpecError(f"{text!r}: give {scheme}://{_example(scheme)}")
    if scheme == "tcp" and (port is None or parts.username or parts.password):
        raise EngineSpecError(f"{text!r}: give tcp://HOST:PORT (e.g. tcp://box:2376)")
    if port == 0:
        raise EngineSpecError(f"{text!r}: the port must be 1-65535")
    return url.rstrip("/")


def _example(scheme: str) -> str:
    return "HOST:PORT" if scheme == "tcp" else "USER@HOST"
