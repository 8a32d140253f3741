"""Secrets by destination (`sandbox.secrets`): each entry names a destination and where its
value comes from on this machine, never the value. The egress proxy puts the value on the
agent's requests to that destination; it never enters the container.

Entries are checked when the config is read (`SecretEntry`); values are read, bounded and
checked before anything starts (`resolve_secrets`), and live only in the proxy's config.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import model_validator

from sandbox_runner.console.units import byte_count
from sandbox_runner.errors import ConfigError
from sandbox_runner.paths import inside_project
from sandbox_runner.plan.allow import AllowEntry
from sandbox_runner.plan.model import ConfigModel

DEFAULT_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
NEVER_METHODS = ("TRACE", "TRACK", "CONNECT")
"""Methods a secret's destination never gets: TRACE and TRACK reflect the request (its
headers, the secret's among them) back; CONNECT is the tunnel itself, not a request."""
CA_FILE_LIMIT = 1024 * 1024  # bytes of one caCerts file at most (checked before reading)
HEADER_LIMIT = 2048
"""Characters of a secret's whole header value at most (`Bearer …`, `Basic base64(…)`): the
most Squid reads of a quoted value in its configuration. A `file` is read only that far (its
size is checked first)."""
PLACEHOLDER = "fks-placeholder-the-egress-proxy-adds-the-real-secret"
"""What a secret's `env` variable holds in the container: tools that refuse to start without a
key start, and what they send in its place is replaced by the proxy."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_METHOD = re.compile(r"[A-Z][A-Z-]{0,19}")
_USER = re.compile(r"[A-Za-z0-9._~+@-]{1,256}")
# A value Squid passes on as it is inside a quoted header value: no quote, backslash or %
# (its macros), no control character; spaces only inside.
_VALUE = re.compile(r"[!#-$&-\[\]-~]([ !#-$&-\[\]-~]*[!#-$&-\[\]-~])?")
_HEADERS_NOT_SET = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "cookie",
    }
)


class SecretEntry(ConfigModel):
    """A credential the egress proxy adds to the agent's requests to one destination."""

    host: str
    """Destination: `host`, `host:port` (ports default to 443 and 80) or `*.domain[:port]`.
    Allowed implicitly; the secret is added to HTTPS requests only."""
    env: str | None = None
    """Take the value from this variable of fks's environment (the container gets the same
    variable holding a placeholder)."""
    file: str | None = None
    """Take the value from this file (`~` expands; relative to the repository's top), its
    trailing newline removed."""
    header: str = "Authorization"
    """The request header the proxy sets (any the agent sent under that name is removed)."""
    scheme: Literal["bearer", "basic", "raw"] = "bearer"
    """`bearer`: `Bearer <value>`; `basic`: `Basic base64(user:value)`; `raw`: the value."""
    user: str | None = None
    """The user name of a `basic` secret (e.g. `x-access-token` for a GitHub token)."""
    methods: tuple[str, ...] = DEFAULT_METHODS
    """Methods that reach the destination; anything else is refused before the secret is
    added. TRACE, TRACK and CONNECT never are."""

    @model_validator(mode="after")
    def _check(self) -> SecretEntry:
        AllowEntry.parse(self.host)  # a ValueError names the entry
        if (self.env is None) == (self.file is None):
            raise ValueError(f"secret for {self.host}: give exactly one of 'env' and 'file'")
        if self.env is not None and not _ENV_NAME.fullmatch(self.env):
            raise ValueError(f"secret for {self.host}: {self.env!r} is not a variable name")
        if self.file is not None and not self.file.strip():
            raise ValueError(f"secret for {self.host}: 'file' is empty")
        if not _HEADER.fullmatch(self.header) or self.header.lower() in _HEADERS_NOT_SET:
            raise ValueError(
                f"secret for {self.host}: {self.header!r} is not a header a secret may set "
                "(letters, digits and '-'; not Host, Cookie, Content-Length or a hop header)"
            )
        if (self.scheme == "basic") != (self.user is not None):
            raise ValueError(f"secret for {self.host}: 'user' goes with scheme 'basic', and only")
        if self.user is not None and not _USER.fullmatch(self.user):
            raise ValueError(f"secret for {self.host}: user {self.user!r} has characters it cannot")
        self._check_methods()
        return self

    def _check_methods(self) -> None:
        if not self.methods:
            raise ValueError(f"secret for {self.host}: 'methods' lists none")
        for method in self.methods:
            if not _METHOD.fullmatch(method):
                raise ValueError(
                    f"secret for {self.host}: method {method!r} is not an upper-case method name"
                )
            if method in NEVER_METHODS:
                raise ValueError(
                    f"secret for {self.host}: method {method} never reaches a destination with "
                    "a secret (TRACE and TRACK reflect it; CONNECT is the tunnel)"
                )

    @property
    def destination(self) -> AllowEntry:
        return AllowEntry.parse(self.host)

    @property
    def source(self) -> str:
        """Where the value comes from, for the user's eyes: `env NAME` or `file PATH`."""
        return f"env {self.env}" if self.env is not None else f"file {self.file}"

    @property
    def shown_header(self) -> str:
        """The header and what the value goes into, never the value: `Authorization: Bearer`,
        `Authorization: Basic, user NAME`, or the header alone for a raw value."""
        if self.scheme == "bearer":
            return f"{self.header}: Bearer"
        if self.scheme == "basic":
            return f"{self.header}: Basic, user {self.user}"
        return self.header


@dataclass(frozen=True)
class Secret:
    """A secret with its value read: what the proxy needs, and what may be shown of it."""

    destination: AllowEntry
    header: str
    value: str = field(repr=False)
    """The header's whole value (`Bearer …`, `Basic …` or the raw value)."""
    methods: tuple[str, ...]
    source: str
    """`env NAME` or `file PATH`: never the value."""
    env: str | None = None
    """The variable that holds PLACEHOLDER in the container (an `env` secret's own name)."""


def resolve_secrets(
    entries: Sequence[SecretEntry], environ: Mapping[str, str], top: Path
) -> tuple[Secret, ...]:
    """Each entry's value read from its source, bounded and checked; ConfigError (one line
    naming the entry, its source and the fix) for an unset variable, a missing, unreadable or
    oversized file, or a value the proxy cannot pass on."""
    return tuple(_resolve(entry, environ, top) for entry in entries)


def _resolve(entry: SecretEntry, environ: Mapping[str, str], top: Path) -> Secret:
    raw = _read_env(entry, environ) if entry.env is not None else _read_file(entry, top)
    value = raw.removesuffix("\n").removesuffix("\r")
    if not _VALUE.fullmatch(value):
        raise ConfigError(
            f"secret for {entry.host}: the value from {entry.source} is empty or has characters "
            "a header cannot carry (control characters, quotes, '\\' or '%', or a space at "
            "either end)"
        )
    header_value = _header_value(entry, value)
    if len(header_value) > HEADER_LIMIT:
        raise ConfigError(
            f"secret for {entry.host}: its {entry.header} header would be {len(header_value)} "
            f"characters; the egress proxy passes at most {HEADER_LIMIT}; is {entry.source} "
            "the right source?"
        )
    return Secret(
        destination=entry.destination,
        header=entry.header,
        value=header_value,
        methods=tuple(dict.fromkeys(entry.methods)),
        source=entry.source,
        env=entry.env,
    )


def _header_value(entry: SecretEntry, value: str) -> str:
    if entry.scheme == "bearer":
        return f"Bearer {value}"
    if entry.scheme == "basic":
        return "Basic " + base64.b64encode(f"{entry.user}:{value}".encode()).decode()
    return value


def _read_env(entry: SecretEntry, environ: Mapping[str, str]) -> str:
    name = entry.env or ""
    if not environ.get(name):
        raise ConfigError(
            f"secret for {entry.host}: environment variable {name} is not set; "
            f"export {name} before running fks (or remove the secret)"
        )
    return environ[name]


def secret_path(text: str, top: Path) -> Path:
    """A `file` or `caCerts` path: `~` expanded, relative to the repository's top."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else top / path


def _read_file(entry: SecretEntry, top: Path) -> str:
    path = secret_path(entry.file or "", top)
    what = f"secret for {entry.host}"
    data = read_regular(path, HEADER_LIMIT + 2, what, "is it the right file?")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: {path} is not text") from None


def read_regular(path: Path, limit: int, what: str, hint: str) -> bytes:
    """A regular file's bytes, at most `limit` (its size checked before reading); never
    through a link out of its repository (a merged step may have made one), never waiting on
    a pipe or a device. ConfigError (one line: `what`, the path, the fix) otherwise."""
    try:
        fd = os.open(
            inside_project(path, f"{what}: file"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
        )
    except RuntimeError:  # Path.resolve's symlink loop (before Python 3.13)
        raise ConfigError(f"{what}: {path} is a symlink loop; fix the path") from None
    except OSError as exc:
        raise ConfigError(
            f"{what}: cannot read {path} ({exc.strerror or exc}); create it or fix the path"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"{what}: {path} is not a regular file; give a file holding the value"
            )
        if info.st_size > limit:
            raise ConfigError(
                f"{what}: {path} is {byte_count(info.st_size)}, over {limit:,}; {hint}"
            )
        return handle.read(limit + 1)


def merge_secrets(
    ours: Sequence[SecretEntry], theirs: Sequence[SecretEntry]
) -> tuple[SecretEntry, ...]:
    """Both lists; an entry of `theirs` replaces one of `ours` for the same destination."""
    merged = {entry.destination: entry for entry in ours}
    merged.update({entry.destination: entry for entry in theirs})
    return tuple(merged.values())


def read_ca_certs(paths: Sequence[str], top: Path) -> str:
    """The PEM certificates of `sandbox.caCerts`, joined; ConfigError (one line naming the file
    and the fix) for one unreadable, over CA_FILE_LIMIT bytes or holding no certificate."""
    texts = []
    for text in paths:
        path = secret_path(text, top)
        data = read_regular(path, CA_FILE_LIMIT, "caCerts", "give the CA's PEM certificate")
        pem = data.decode("ascii", errors="replace")
        if "-----BEGIN CERTIFICATE-----" not in pem or "\ufffd" in pem:
            raise ConfigError(f"caCerts: {path} holds no PEM certificate; give the CA's PEM file")
        texts.append(pem.strip() + "\n")
    return "".join(texts)
