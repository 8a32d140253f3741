"""The Docker sandbox settings of `forge/chains.json` and the one place they are merged: the
top-level settings, then the chain's, then the command line's (`--image`, `--engine`,
`--runtime`, `--allow`).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
)

from sandbox_runner.errors import UsageError
from sandbox_runner.plan.allow import AllowEntry, parse_host
from sandbox_runner.plan.checks import FRIENDLY, did_you_mean
from sandbox_runner.plan.engine import EngineSpec
from sandbox_runner.plan.model import ConfigModel
from sandbox_runner.plan.secrets import SecretEntry, merge_secrets, secret_path

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
NETWORK_KEYWORDS = ("allowlist", "open", "none", "host", "bridge")
"""The `network` settings of fks's own; anything else is a Docker network of the user's."""
DOCKER_NETWORK = "docker:"
"""How a Docker network of the user's is named: `docker:NAME`."""


def own_network(value: str | None) -> str | None:
    """The Docker network of the user's a `network` setting names (`docker:NAME`, or a bare
    name that is none of fks's settings), else None."""
    if value is None or value in NETWORK_KEYWORDS:
        return None
    return value.removeprefix(DOCKER_NETWORK)


class SandboxSettings(ConfigModel):
    """Docker sandbox settings; chain level, overridable per agent."""

    image: str | None = None
    """Agent image (default: fks-agent:latest); `devcontainer` builds and uses the repository's
    .devcontainer/devcontainer.json."""
    image_with: tuple[str, ...] = Field(default=(), alias="imageWith")
    """The agent CLIs besides Claude Code (`codex`, `gemini`, `opencode`) that `fks image
    build`, run in this project without `--with`, puts in the agent image (top level only)."""
    network: str | None = None
    """`allowlist` (default: only `allow` and, for Claude steps, the model API, through fks's
    egress proxy), `open` (any address; `bridge` is the same), `none` (nothing but the model
    API for Claude steps), or `docker:NAME`, an existing Docker network as it is, without the
    egress proxy (a bare NAME too, unless it is close to one of these: `allowlst` is refused)."""
    allow: tuple[str, ...] = ()
    """`host`, `host:port`, `*.domain` or `*.domain:port` entries the agent may reach with
    `network: allowlist` (ports default to 443 and 80; `*.domain` is its subdomains, not
    itself); joined with the chain's, the agent's and `--allow`."""
    deny: tuple[str, ...] = ()
    """Destinations (the forms of `allow`) refused even when `allow` or a secret names them;
    an entry without a port covers every port."""
    secrets: tuple[SecretEntry, ...] = ()
    """Credentials the egress proxy adds to the agent's HTTPS requests to one destination
    each; their values never enter the container. An agent's entry replaces the chain's for
    the same destination."""
    model_apis: tuple[Literal["anthropic", "openai", "gemini"], ...] = Field(
        default=(), alias="modelApis"
    )
    """Model APIs a plain program (an agent that is no agent CLI) reaches through the egress
    proxy, which adds the key set on this machine (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
    `GEMINI_API_KEY`) and meters its spend; an agent CLI reaches its own API only."""
    model_prices: dict[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,99}$")],
        tuple[Annotated[float, Field(ge=0, le=10_000)], Annotated[float, Field(ge=0, le=10_000)]],
    ] = Field(default_factory=dict, alias="modelPrices")
    """Model family (a part of the model's name) -> [input, output] USD per million tokens,
    for the egress proxy's meter, before its own table (`{"my-model": [1.0, 4.0]}`); a model
    of no family known costs the dearest price."""
    hosts: dict[str, str] = Field(default_factory=dict)
    """Host name -> IP address (or `host-gateway`, this machine) for the proxy's lookups, for
    names public DNS does not know."""
    ca_certs: tuple[str, ...] = Field(default=(), alias="caCerts")
    """PEM files of the CAs the proxy trusts when it talks TLS to a secret's destination
    (`~` expands; relative to the repository's top); the system's are trusted too."""
    memory: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]+)?[bBkKmMgG]?$")
    """Memory limit, Docker syntax (`2g`, `512m`)."""
    cpus: StrictFloat | None = Field(default=None, gt=0, allow_inf_nan=False)
    """CPU limit (e.g. 2 or 0.5)."""
    pids_limit: StrictInt | None = Field(default=None, alias="pidsLimit", gt=0)
    """Maximum number of processes in the container."""
    timeout: StrictFloat | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Seconds one iteration may run before it is killed (counts as incomplete)."""
    env: tuple[str, ...] = ()
    """Names of host environment variables passed into the container (values never logged)."""
    mounts: tuple[str, ...] = ()
    """Extra host paths mounted read-only at the same path."""
    engine: str | None = None
    """Docker engine the sandbox runs on: `local` (default: the engine of DOCKER_HOST / the
    current context), `tcp://HOST:PORT` (DOCKER_TLS_VERIFY/DOCKER_CERT_PATH apply),
    `ssh://USER@HOST`, `context:NAME`, `swarm` or `swarm:URL` (not for runs yet). On a remote
    engine or a swarm the workspace's base is sent to it as data."""
    runtime: str | None = None
    """The OCI runtime of the step's containers, as the engine names it (`docker info`
    Runtimes): `runc` (the engine's default), `runsc` (gVisor: the agent gets a kernel of its
    own; see docs/sandbox.md to install and register it), or any runtime the engine has. fks's
    egress proxy stays on the engine's default."""
    warm: StrictBool | None = None
    """Start the next iterations' containers while one runs (default true; `false`: each
    iteration's container is created and started when the iteration begins)."""
    keep_workspace: StrictBool | None = Field(default=None, alias="keepWorkspace")
    """Keep the repository's workspace volume between runs (default false; the local engine
    only): the next run's first step checks out only the files that differ from the last
    run's checkout, instead of every file into a new volume. Nothing an agent left in it is
    trusted (see docs/sandbox.md); `fks clean` removes it."""

    @field_validator("image_with")
    @classmethod
    def _known_clis(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from sandbox_runner.images.clis import parse_clis

        try:
            parse_clis(value, where="imageWith")
        except UsageError as exc:
            raise ValueError(str(exc).removeprefix("imageWith: ")) from None
        return value

    @field_validator("memory")
    @classmethod
    def _memory_not_zero(cls, value: str | None) -> str | None:
        if value is not None and not any(c in "123456789" for c in value):
            raise ValueError(FRIENDLY["string_pattern_mismatch"])
        return value

    @field_validator("allow", "deny")
    @classmethod
    def _allow_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            AllowEntry.parse(entry)  # a ValueError names the entry
        return value

    @field_validator("hosts")
    @classmethod
    def _host_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for name, address in value.items():
            parse_host(name, name)  # a ValueError names it
            if address != "host-gateway":
                try:
                    ipaddress.ip_address(address)
                except ValueError:
                    raise ValueError(
                        f"hosts: {name}: {address!r} is not an IP address or 'host-gateway'"
                    ) from None
        return value

    @field_validator("engine")
    @classmethod
    def _engine_form(cls, value: str | None) -> str | None:
        if value is not None:
            EngineSpec.parse(value)  # a ValueError names the value and the forms it may take
        return value

    @field_validator("network")
    @classmethod
    def _network_form(cls, value: str | None) -> str | None:
        if value is None or value in NETWORK_KEYWORDS:
            return value
        name = value.removeprefix(DOCKER_NETWORK)
        if name in NETWORK_KEYWORDS:
            raise ValueError(
                f"{value!r}: {name!r} is a setting of fks's, not a Docker network; write {name!r}"
            )
        if not _NETWORK_NAME.fullmatch(name):
            raise ValueError(
                f"{value!r} is none of allowlist, open, none, host, nor a Docker network's name "
                "(docker:NAME: letters, digits, '.', '_' and '-')"
            )
        hint = did_you_mean(value.lower(), NETWORK_KEYWORDS)
        if name == value and hint:
            raise ValueError(
                f"{value!r} is not a network setting{hint}; a Docker network of your own is "
                f"written 'docker:{value}'"
            )
        return value

    @field_validator("runtime")
    @classmethod
    def _runtime_name(cls, value: str | None) -> str | None:
        if value is not None and not _RUNTIME_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a runtime's name (letters, digits, '.', '_' and '-', "
                "as `docker info` lists them: e.g. runc or runsc)"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not an environment variable name "
                    "(letters, digits and _, not starting with a digit)"
                )
        return value

    def merged(self, override: SandboxSettings | None) -> SandboxSettings:
        """These settings with every field `override` sets replacing ours; lists are joined."""
        if override is None:
            return self
        data: dict[str, Any] = {
            name: getattr(self, name) for name in self.model_fields_set if name in _FIELDS
        }
        for name in override.model_fields_set & _FIELDS:
            value = getattr(override, name)
            if name in ("env", "mounts", "allow", "deny", "ca_certs", "image_with", "model_apis"):
                data[name] = tuple(dict.fromkeys((*data.get(name, ()), *value)))
            elif name == "secrets":
                data[name] = merge_secrets(data.get(name, ()), value)
            elif name in ("hosts", "model_prices"):
                data[name] = {**data.get(name, {}), **value}
            else:
                data[name] = value
        return SandboxSettings.model_validate(data)


_FIELDS = frozenset(SandboxSettings.model_fields)


def merge_sandbox_settings(
    *layers: SandboxSettings | None,
    image: str | None = None,
    engine: str | None = None,
    allow: Sequence[str] = (),
    runtime: str | None = None,
) -> SandboxSettings:
    """The defaults, then each of `layers` in turn (the top-level settings, the chain's), then
    `--image`, `--engine`, `--runtime` and `--allow`; a bad option value is a usage error
    naming it."""
    settings = SandboxSettings()
    for layer in layers:
        settings = settings.merged(layer)
    if image:
        settings = settings.merged(SandboxSettings(image=image))
    if engine:
        try:
            settings = settings.merged(SandboxSettings(engine=engine))
        except ValueError as exc:
            raise UsageError(f"--engine: {first_error(exc)}") from None
    if runtime:
        try:
            settings = settings.merged(SandboxSettings(runtime=runtime))
        except ValueError as exc:
            raise UsageError(f"--runtime: {first_error(exc)}") from None
    if allow:
        try:
            settings = settings.merged(SandboxSettings(allow=tuple(allow)))
        except ValueError as exc:
            raise UsageError(f"--allow: {first_error(exc)}") from None
    return settings


def first_error(exc: ValueError) -> str:
    """The first problem of a settings error, as one line (for --allow, --engine, --runtime)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return str(exc.errors()[0].get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


def files_read(every: Iterable[SandboxSettings | None], top: Path) -> tuple[str, ...]:
    """The files in the repository at `top` that the `secrets` and `caCerts` of `every` read,
    relative to it: a landing never changes them (the next run would send what a branch put
    there)."""
    found: list[str] = []
    roots = {Path(os.path.normpath(top)), Path(os.path.realpath(top))}
    for settings in every:
        if settings is None:
            continue
        named = [e.file for e in settings.secrets if e.file is not None] + list(settings.ca_certs)
        for text in named:
            path = secret_path(text, top)
            for form in {Path(os.path.normpath(path)), Path(os.path.realpath(path))}:
                found += [form.relative_to(r).as_posix() for r in roots if form.is_relative_to(r)]
    return tuple(sorted({p for p in found if p != "."}))
