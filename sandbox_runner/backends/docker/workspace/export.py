"""What comes out of a sandbox: the data an iteration's container leaves for the host.

Every container ends by writing a bundle and a few `key=value` lines (see `iteration.sh`) in
its workspace. The host reads them through the Docker API as a tar stream, size-bounded,
regular files only, into a directory of its own: it never opens a path the agent could write.
"""

from __future__ import annotations

import contextlib
import os
import re
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker

WORKSPACE = "/workspace"
OBJECTS = "/fks/objects"
EXPORT_DIR = f"{WORKSPACE}/.git/fks-export"
MAX_INFO_BYTES = 64 * 1024
DEFAULT_MAX_BUNDLE_BYTES = 2 * 1024**3
_INFO_KEYS = frozenset(
    {"before", "after", "warning", "error", "missing", "end", "bundle", "code", "export_ms"}
)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")
_SHOWN_NAME = 200  # characters shown of a name the agent gave a file where the export goes


def _shown_name(name: str) -> str:
    """A name the agent gave, on one line of printable ASCII (any other character `?`), cut."""
    flat = _PRINTABLE.sub("?", name)
    return flat if len(flat) <= _SHOWN_NAME else flat[: _SHOWN_NAME - 1] + "\u2026"


class ExportError(SandboxError):
    """What an iteration left for export cannot be taken (too big, malformed, not a file)."""


def max_bundle_bytes() -> int:
    """The largest bundle fks takes from one iteration (FKS_MAX_BUNDLE_BYTES overrides)."""
    raw = os.environ.get("FKS_MAX_BUNDLE_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_BUNDLE_BYTES


@cache
def script() -> str:
    return (Path(__file__).with_name("iteration.sh")).read_text(encoding="utf-8")


def wrapped(argv: Iterable[str]) -> list[str]:
    """The container command: the workspace script around the agent's argv."""
    return ["sh", "-c", script(), "fks-iteration", *argv]


_FILE_PATH = re.compile(r"/[A-Za-z0-9._/-]+")


def files_env(files: Mapping[str, str]) -> dict[str, str]:
    """An agent CLI's settings files (`ExecSpec.files`) as the variables the workspace script
    writes them from before the agent starts: FKS_CLI_FILES, their paths; FKS_CLI_FILE_<n>,
    the n-th one's text."""
    if not files:
        return {}
    for path in files:
        if not _FILE_PATH.fullmatch(path) or ".." in path.split("/"):
            raise SandboxError(f"an agent CLI's settings file has a path fks cannot send: {path!r}")
    env = {"FKS_CLI_FILES": " ".join(files)}
    env.update({f"FKS_CLI_FILE_{n}": text for n, text in enumerate(files.values())})
    return env


@dataclass(frozen=True)
class Export:
    """What one container left: parsed `info` lines and the bundle, if any, on the host."""

    values: dict[str, list[str]] = field(default_factory=dict)
    bundle: Path | None = None

    @property
    def complete(self) -> bool:
        """The script got to its end (it was not killed, and the agent did not interfere)."""
        return "end" in self.values

    @property
    def agent_missing(self) -> bool:
        return "missing" in self.values

    def first(self, key: str) -> str | None:
        found = self.values.get(key)
        return found[0] if found else None

    @property
    def changed(self) -> bool | None:
        before, after = self.first("before"), self.first("after")
        return None if before is None or after is None else before != after

    @property
    def export_seconds(self) -> float:
        """How long the container took to export, as it says (0: it did not say)."""
        said = self.first("export_ms") or ""
        return int(said) / 1000 if said.isdigit() and len(said) <= 9 else 0.0

    @property
    def warnings(self) -> list[str]:
        return [*self.values.get("warning", ()), *self.values.get("error", ())]


def parse_info(data: bytes) -> dict[str, list[str]]:
    """`key=value` lines (or tab-separated); unknown keys dropped, values made printable and
    cut short."""
    values: dict[str, list[str]] = {}
    for raw in data.decode("utf-8", "replace").replace("\t", "\n").splitlines()[:200]:
        key, sep, value = raw.partition("=")
        if sep and key in _INFO_KEYS:
            values.setdefault(key, []).append(_PRINTABLE.sub("?", value)[:300])
    return values


class _Bounded:
    """A file-like view of a chunk iterator that refuses to read past `limit` bytes."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self._chunks = chunks
        self._limit = limit
        self._read = 0
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._read += len(chunk)
            if self._read > self._limit:
                raise ExportError(
                    f"the iteration's export is larger than {self._limit} bytes; "
                    "raise FKS_MAX_BUNDLE_BYTES if the agent really made that much"
                )
            self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def read_export(client: docker.DockerClient, container_id: str, dest: Path) -> Export:
    """Read the container's export directory through the Docker API into `dest`.

    Only regular files named `info` and `bundle` are taken; a symlink, device or anything else
    there is refused, and nothing is ever followed on the host.
    """
    import docker.errors

    limit = max_bundle_bytes()
    try:
        chunks, _stat = client.api.get_archive(container_id, EXPORT_DIR)
    except docker.errors.NotFound:
        return Export()
    except docker.errors.APIError as exc:
        raise ExportError(
            f"could not read the iteration's export: {exc.explanation or exc}"
        ) from None
    values: dict[str, list[str]] = {}
    bundle: Path | None = None
    stream = _Bounded(iter(chunks), limit + MAX_INFO_BYTES + 1024 * 1024)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                name = member.name.rstrip("/")
                if name == "fks-export" and member.isdir():
                    continue
                leaf = name.removeprefix("fks-export/")
                if leaf not in ("info", "bundle") or not member.isfile():
                    raise ExportError(
                        f"the iteration's export holds '{_shown_name(name)}' "
                        f"({_kind(member)}); refused"
                    )
                source = tar.extractfile(member)
                if source is None:
                    continue
                if leaf == "info":
                    values = parse_info(source.read(MAX_INFO_BYTES))
                else:
                    bundle = dest / "step.bundle"
                    _copy(source, bundle, limit)
    except tarfile.TarError as exc:
        raise ExportError(f"the iteration's export is not a valid archive: {exc}") from None
    finally:
        with contextlib.suppress(Exception):
            chunks.close()
    return Export(values=values, bundle=bundle)


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return f"a link to {member.linkname[:80]!r}"
    return "a directory" if member.isdir() else "not a regular file"


def _copy(source: IO[bytes], target: Path, limit: int) -> None:
    written = 0
    with target.open("wb") as out:
        while chunk := source.read(1024 * 1024):
            written += len(chunk)
            if written > limit:
                raise ExportError(
                    f"the iteration's bundle is larger than {limit} bytes; "
                    "raise FKS_MAX_BUNDLE_BYTES if the agent really made that much"
                )
            out.write(chunk)


def held_back(data: bytes, token: bytes) -> int:
    """How many bytes at the end of `data` could begin `token`."""
    return next(
        (n for n in range(min(len(token) - 1, len(data)), 0, -1) if token.startswith(data[-n:])),
        0,
    )


_BASE_INDEX = re.compile(r"[0-9]{1,20}:[0-9]{1,12}\.[0-9]{9}:[0-9]{1,15}")


class PreparedLine:
    """Takes the script's `fks-prepared <nonce> <value>` line, printed before the agent starts,
    out of a stderr stream. Only the first one counts: the agent, which can read the nonce,
    can print the same line only after it.

    `value`: `kept` (the step's workspace as the last iteration left it), or the base index the
    script just wrote as `<inode>:<ctime>:<size>` (see `iteration.sh`); None while not seen.
    """

    def __init__(self, nonce: str) -> None:
        self._token = f"fks-prepared {nonce} ".encode()
        self._held = b""
        self._done = False
        self.value: str | None = None

    @property
    def base_index(self) -> str | None:
        """The base index the line names, if it is well-formed."""
        value = self.value or ""
        return value if _BASE_INDEX.fullmatch(value) else None

    def feed(self, data: bytes) -> bytes:
        if self._done:
            return data
        data, self._held = self._held + data, b""
        found = data.find(self._token)
        if found >= 0:
            end = data.find(b"\n", found)
            if end < 0 and len(data) - found < 256:
                self._held = data[found:]
                return data[:found]
            self._done = True
            if end < 0:  # not the script's line
                return data
            self.value = data[found + len(self._token) : end].decode("ascii", "replace")
            return data[:found] + data[end + 1 :]
        keep = held_back(data, self._token)
        self._held = data[len(data) - keep :]
        return data[: len(data) - keep]

    def finish(self) -> bytes:
        held, self._held = self._held, b""
        self._done = True
        return held


class ReportFilter:
    """Takes the script's closing `fks-export <nonce> …` line out of a stderr stream.

    Only bytes that could still begin that line are held back, so output is never delayed.
    """

    def __init__(self, nonce: str) -> None:
        self._token = f"fks-export {nonce} ".encode()
        self._held = b""
        self.report: bytes | None = None
        """What followed the token (None: the line never came)."""

    def feed(self, data: bytes) -> bytes:
        if self.report is not None:
            self.report = (self.report + data)[:MAX_INFO_BYTES]
            return b""
        data = self._held + data
        found = data.find(self._token)
        if found >= 0:
            self._held, self.report = b"", data[found + len(self._token) :][:MAX_INFO_BYTES]
            return data[:found]
        keep = held_back(data, self._token)
        self._held = data[len(data) - keep :]
        return data[: len(data) - keep]

    def finish(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def export(self) -> Export | None:
        """The export as reported, when it needs no bundle fetched (else None)."""
        reported = self.reported()
        if reported is None or "bundle" in reported.values:
            return None
        return reported

    def reported(self) -> Export | None:
        """The export as reported, a bundle or not (None: no complete report came)."""
        if self.report is None:
            return None
        values = parse_info(self.report)
        return Export(values=values) if "end" in values else None


class ExportChannel(Protocol):
    """How an iteration's bundle reaches the host: carried in its output (`logged_bundle.py`:
    always where the host cannot reach its container, else when it is small), or read from
    its stopped container."""

    def feed(self, data: bytes) -> bytes:
        """The iteration's stderr without the channel's own lines."""
        ...

    def finish(self) -> bytes:
        """The output has ended: what was held back of it."""
        ...

    def taken(self, report: ReportFilter) -> Export | None:
        """The export, as reported and carried (ExportError if what was carried is refused);
        None: it is to be read from the stopped container."""
        ...
