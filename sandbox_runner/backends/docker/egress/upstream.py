"""The model APIs as the egress proxy reaches them (`ApiUpstream`): each one's URL and real
credential, which goes into the proxy's config and nowhere else; the agent holds a placeholder
(`PLACEHOLDER`). `API_KINDS` says how each API's users set its key and address on their
machine, which calls the proxy passes on, and where the agent reaches it (`agent_env`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from sandbox_runner.errors import SandboxError
from sandbox_runner.plan.allow import parse_host

if TYPE_CHECKING:
    from sandbox_runner.plan.agents import AgentCommand
    from sandbox_runner.plan.sandbox import SandboxSettings

# Characters a credential may have: those of API keys and OAuth tokens, and none that
# squid.conf would interpret inside a quoted value (%macros, ${macros}, quotes, escapes).
_CREDENTIAL_RE = re.compile(r"[A-Za-z0-9._~+/=:-]{1,4096}")
# A base URL's path (OpenAI's /v1): plain segments only, nothing Squid's regex would read.
_PATH_RE = re.compile(r"(/[A-Za-z0-9._~-]{1,64}){0,4}/?")

PLACEHOLDER = "fks-placeholder-the-egress-proxy-adds-the-real-credential"
"""What the agent holds in place of each model API's credential."""

Header = Literal["x-api-key", "authorization", "x-goog-api-key"]
Kind = Literal["anthropic", "openai", "gemini"]
_MODEL = r"[A-Za-z0-9][A-Za-z0-9._:@-]*"
_GEMINI_MODEL = r"[A-Za-z0-9][A-Za-z0-9._@-]*"  # its calls follow a ':'


@dataclass(frozen=True)
class ApiKind:
    """One model API as its clients' users know it."""

    name: Kind
    credentials: tuple[tuple[str, Header], ...]
    """The variables that hold its credential (the first one set counts) and the header each
    goes in."""
    base_url_var: str
    default_url: str
    port: int
    """The agent's port for it on 127.0.0.1 (and the proxy's)."""
    calls: tuple[tuple[str, str, str], ...]
    """What the proxy passes on: (name, method, path-and-query regex after the base URL's
    path). Anything else gets 403 before the credential is added, so a method or path that
    reflects a request (TRACE, an echo or debug endpoint of a gateway) never gets one."""


API_KINDS: dict[Kind, ApiKind] = {
    kind.name: kind
    for kind in (
        ApiKind(
            "anthropic",
            (
                ("ANTHROPIC_API_KEY", "x-api-key"),
                ("ANTHROPIC_AUTH_TOKEN", "authorization"),
                ("CLAUDE_CODE_OAUTH_TOKEN", "authorization"),
            ),
            "ANTHROPIC_BASE_URL",
            "https://api.anthropic.com",
            8080,
            (
                ("messages", "POST", r"/v1/messages(/count_tokens)?(\?beta=true)?"),
                ("models", "GET", rf"/v1/models(/{_MODEL})?(\?[A-Za-z0-9_=&.-]*)?"),
            ),
        ),
        ApiKind(
            "openai",
            (("OPENAI_API_KEY", "authorization"),),
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            8081,
            (
                ("responses", "POST", r"/responses"),
                ("models", "GET", rf"/models(/{_MODEL})?(\?[A-Za-z0-9_=&.-]*)?"),
            ),
        ),
        ApiKind(
            "gemini",
            (("GEMINI_API_KEY", "x-goog-api-key"),),
            "GOOGLE_GEMINI_BASE_URL",
            "https://generativelanguage.googleapis.com",
            8082,
            (
                (
                    "generate",
                    "POST",
                    rf"/v1(beta|alpha)?/models/{_GEMINI_MODEL}:"
                    r"(streamGenerateContent|generateContent|countTokens)(\?alt=sse)?",
                ),
                (
                    "models",
                    "GET",
                    rf"/v1(beta|alpha)?/models(/{_GEMINI_MODEL})?(\?[A-Za-z0-9_=&.-]*)?",
                ),
            ),
        ),
    )
}

CLI_APIS: dict[str, Kind] = {
    "claude": "anthropic",
    "opencode": "anthropic",
    "codex": "openai",
    "gemini": "gemini",
}
"""The API each agent CLI speaks (by its `cli` name); a step reaches its CLI's only."""


@dataclass(frozen=True)
class ApiUpstream:
    """A model API, reached through the proxy, which puts the real credential on every
    request; the agent holds only a placeholder in `env_name`."""

    url: str
    """`http(s)://host[:port][/path]`: the proxy forwards request paths as they come."""
    credential: str = field(repr=False)
    """The real key or token; it goes into the proxy's config and nowhere else."""
    header: Header = "x-api-key"
    """How the API expects it: `x-api-key: <key>`, `Authorization: Bearer <token>` or
    `x-goog-api-key: <key>`."""
    env_name: str = "ANTHROPIC_API_KEY"
    """The agent's variable that carries the placeholder (its client sends it as `header`)."""
    kind: Kind = "anthropic"

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SandboxError(f"API URL {self.url!r}: must be http(s)://host[:port]")
        if not _PATH_RE.fullmatch(parts.path) or parts.query or parts.fragment or parts.username:
            raise SandboxError(
                f"API URL {self.url!r}: the egress proxy forwards to a host and a plain path "
                "only; remove the query and user part"
            )
        _ = self.host, self.port  # validated here, not first in squid_config
        if not _CREDENTIAL_RE.fullmatch(self.credential):
            raise SandboxError(
                f"The credential in {self.env_name} has characters the egress proxy cannot "
                "pass on (allowed: letters, digits and ._~+/=:-)"
            )

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        default_url: str | None = None,
        kind: Kind = "anthropic",
    ) -> ApiUpstream | None:
        """From the variables `kind`'s users set (its base URL variable, else `default_url`
        or the API's own, and the first of its credential variables set); None without one."""
        api = API_KINDS[kind]
        url = env.get(api.base_url_var) or default_url or api.default_url
        for name, header in api.credentials:
            if env.get(name):
                return cls(url=url, credential=env[name], header=header, env_name=name, kind=kind)
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

    @property
    def path(self) -> str:
        """The base URL's path, without a trailing slash ('' for none)."""
        return urlsplit(self.url).path.rstrip("/")


def agent_env(upstream: ApiUpstream) -> dict[str, str]:
    """What an agent container's environment gets for `upstream`: its API kind's base URL
    variable pointing at the proxy's port for it on 127.0.0.1 (the upstream's own path kept,
    such as OpenAI's /v1), and `upstream.env_name` holding PLACEHOLDER, which the proxy
    replaces with the real credential. Anthropic: ANTHROPIC_BASE_URL=http://127.0.0.1:8080
    and ANTHROPIC_API_KEY (or the token variable set on the host); OpenAI:
    OPENAI_BASE_URL=http://127.0.0.1:8081/v1 and OPENAI_API_KEY; Gemini:
    GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8082 and GEMINI_API_KEY."""
    api = API_KINDS[upstream.kind]
    return {
        api.base_url_var: f"http://127.0.0.1:{api.port}{upstream.path}",
        upstream.env_name: PLACEHOLDER,
    }


def upstreams_for(kinds: tuple[Kind, ...], env: Mapping[str, str]) -> tuple[ApiUpstream, ...]:
    """The upstreams of `kinds` whose credential `env` (the host's) holds, in `kinds` order."""
    found = (ApiUpstream.from_env(env, kind=kind) for kind in dict.fromkeys(kinds))
    return tuple(api for api in found if api is not None)


API_ENV: frozenset[str] = frozenset(
    name
    for api in API_KINDS.values()
    for name in (api.base_url_var, *(variable for variable, _ in api.credentials))
)
"""Every API's credential and address variables: the agent gets the proxy's in their place
(those it lists in `sandbox.env` it gets: its choice)."""


def api_kinds(agent: AgentCommand, settings: SandboxSettings) -> tuple[Kind, ...]:
    """The model APIs a step reaches: its agent CLI's own, or for a plain program those of
    `sandbox.modelApis`."""
    cli = agent.cli
    if cli is None:
        return tuple(settings.model_apis)
    return (CLI_APIS[cli.name],) if cli.name in CLI_APIS else ()
