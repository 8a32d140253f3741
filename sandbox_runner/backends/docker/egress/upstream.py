"""The model API as the egress proxy reaches it (`ApiUpstream`): its URL and the real
credential, which goes into the proxy's config and nowhere else; the agent holds a placeholder
(`proxy.PLACEHOLDER`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from sandbox_runner.errors import SandboxError
from sandbox_runner.plan.allow import parse_host

# Characters a credential may have: those of API keys and OAuth tokens, and none that
# squid.conf would interpret inside a quoted value (%macros, ${macros}, quotes, escapes).
_CREDENTIAL_RE = re.compile(r"[A-Za-z0-9._~+/=:-]{1,4096}")


_CREDENTIAL_VARIABLES: tuple[tuple[str, Literal["x-api-key", "authorization"]], ...] = (
    ("ANTHROPIC_API_KEY", "x-api-key"),
    ("ANTHROPIC_AUTH_TOKEN", "authorization"),
    ("CLAUDE_CODE_OAUTH_TOKEN", "authorization"),
)


@dataclass(frozen=True)
class ApiUpstream:
    """The model API, reached through the proxy, which puts the real credential on every
    request; the agent holds only a placeholder in `env_name`."""

    url: str
    """`http(s)://host[:port]`, no path: the proxy forwards request paths as they come."""
    credential: str = field(repr=False)
    """The real key or token; it goes into the proxy's config and nowhere else."""
    header: Literal["x-api-key", "authorization"] = "x-api-key"
    """How the API expects it: `x-api-key: <key>` or `Authorization: Bearer <token>`."""
    env_name: str = "ANTHROPIC_API_KEY"
    """The agent's variable that carries the placeholder (Claude Code sends it as `header`)."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SandboxError(f"API URL {self.url!r}: must be http(s)://host[:port]")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise SandboxError(
                f"API URL {self.url!r}: the egress proxy forwards to a host only; "
                "remove the path, query and user part"
            )
        _ = self.host, self.port  # validated here, not first in squid_config
        if not _CREDENTIAL_RE.fullmatch(self.credential):
            raise SandboxError(
                f"The credential in {self.env_name} has characters the egress proxy cannot "
                "pass on (allowed: letters, digits and ._~+/=:-)"
            )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, default_url: str = "https://api.anthropic.com"
    ) -> ApiUpstream | None:
        """From Claude Code's variables (ANTHROPIC_BASE_URL and the first credential set of
        ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN); None without one."""
        url = env.get("ANTHROPIC_BASE_URL") or default_url
        for name, header in _CREDENTIAL_VARIABLES:
            if env.get(name):
                return cls(url=url, credential=env[name], header=header, env_name=name)
        return None

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    @property
    def host(self) -> str:
        return parse_host(urlsplit(self.url).hostname or "", self.url)

    @property
    def port(self) -> int:
        try:
            port = urlsplit(self.url).port
        except ValueError:
            raise SandboxError(f"API URL {self.url!r}: the port must be 1-65535") from None
        return port or (443 if self.tls else 80)
