"""`sandbox.secrets`, `deny` and `caCerts` checked against this machine before anything starts
(by `fks validate`, `fks run --sandbox` and `fks forge run`), and how a step's secrets are
shown (by destination, header and source; never a value)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from sandbox_runner.console.units import byte_count
from sandbox_runner.errors import ConfigError
from sandbox_runner.paths import inside_project
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.plan.secrets import SecretEntry, resolve_secrets, secret_path

CA_LIMIT = 2**20
"""Bytes a `caCerts` file may have (its size is checked before it is read)."""
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
ALLOWLIST = "allowlist"


def secret_problems(
    settings: SandboxSettings,
    where: str,
    top: Path,
    environ: Mapping[str, str],
    *,
    values: bool = True,
) -> list[str]:
    """What is wrong with the settings' secrets, `deny` and `caCerts` on this machine, one line
    each naming `where` (`sandbox`, `agents.NAME.sandbox`, ...) and the fix. `values`: read
    each secret's value too (a dry run shows an unusable one instead)."""
    problems = [f"{where}: {p}" for p in _setting_problems(settings)]
    problems += [f"{where}.caCerts: {p}" for p in _ca_problems(settings.ca_certs, top)]
    if values:
        for entry in settings.secrets:
            try:
                resolve_secrets([entry], environ, top)
            except ConfigError as exc:
                problems.append(f"{where}: {exc}")
    return problems


def check_secrets(
    settings: SandboxSettings,
    where: str,
    top: Path,
    environ: Mapping[str, str],
    *,
    values: bool = True,
) -> None:
    """`secret_problems`' first problem as a ConfigError (a run stops at it)."""
    problems = secret_problems(settings, where, top, environ, values=values)
    if problems:
        raise ConfigError(problems[0])


def _setting_problems(settings: SandboxSettings) -> list[str]:
    """Secrets a network without the egress proxy cannot add, that `sandbox.env` would put in
    the container, or that `deny` refuses."""
    problems = []
    mode = settings.network or ALLOWLIST
    if settings.secrets and mode != ALLOWLIST:
        problems.append(
            f"network '{mode}' cannot carry secrets: the egress proxy adds them, and only "
            "network 'allowlist' goes through it; set network to 'allowlist' or remove the secrets"
        )
    for entry in settings.secrets:
        if entry.env is not None and entry.env in settings.env:
            problems.append(
                f"secret for {entry.host}: {entry.env} is also in 'env', which would put its value "
                f"in the container; remove {entry.env} from 'env' (the container gets a "
                "placeholder, the proxy adds the value)"
            )
        if denied := _denied_by(entry, settings.deny):
            problems.append(
                f"secret for {entry.host}: deny entry '{denied}' refuses its destination, so the "
                "secret could never be used; remove the secret or the deny entry"
            )
    return problems


def _denied_by(entry: SecretEntry, deny: tuple[str, ...]) -> str | None:
    """The first `deny` entry that covers the secret's destination on one of its ports."""
    destination = entry.destination
    for text in deny:
        refused = AllowEntry.parse(text)
        if any(refused.matches(destination.host, port) for port in destination.ports):
            return text
    return None


def _ca_problems(files: tuple[str, ...], top: Path) -> list[str]:
    problems = []
    for text in files:
        path = secret_path(text, top)
        try:
            data = _read_bounded(path, CA_LIMIT)
        except ConfigError as exc:
            problems.append(f"{text}: {exc}")
            continue
        if PEM_CERTIFICATE not in data:
            problems.append(
                f"{text}: {path} holds no '{PEM_CERTIFICATE.decode()}'; give a PEM file of "
                "CA certificates"
            )
    return problems


def _read_bounded(path: Path, limit: int) -> bytes:
    """A regular file's bytes, its size checked before they are read (never waits on a pipe)."""
    try:
        fd = os.open(
            inside_project(path, "caCerts file"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path} ({exc.strerror or exc}); create it or fix the entry"
        ) from None
    except RuntimeError:  # Path.resolve's symlink loop (before Python 3.13)
        raise ConfigError(f"{path} is a symlink loop; give a PEM file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path} is not a regular file; give a PEM file")
        if info.st_size > limit:
            raise ConfigError(
                f"{path} is {byte_count(info.st_size)}, over the {limit // 2**20} MiB a CA file may "
                "have; is it the right file?"
            )
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def describe_secret(entry: SecretEntry, environ: Mapping[str, str], top: Path) -> str:
    """A secret for --dry-run and -v: destination, header with its scheme (and a `basic`
    secret's user) and source, with why it cannot be used when its value cannot be read here
    (`not set`). Never the value."""
    shown = f"{entry.destination} ({entry.shown_header}, from {entry.source}"
    try:
        resolve_secrets([entry], environ, top)
    except ConfigError as exc:
        unset = entry.env is not None and not environ.get(entry.env)
        why = "not set" if unset else str(exc).removeprefix(f"secret for {entry.host}: ")
        return f"{shown}: {why})"
    return f"{shown})"
