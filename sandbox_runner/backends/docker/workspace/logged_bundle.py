"""An iteration's bundle, carried in its output stream: `iteration.sh` (FKS_EXPORT_VIA=log)
prints the bundle on stderr, and `LoggedBundle` takes it out of that stream, bounded and its
digest checked. A swarm task's bundle always comes this way (the host cannot read a task's
container from the manager); a local container's comes this way when it is small
(`SmallInOutput`: FKS_EXPORT_VIA=log-small), which spares the engine an archive of the
stopped container per iteration, and is read from the stopped container otherwise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import IO

from sandbox_runner.backends.docker.workspace.export import (
    Export,
    ExportError,
    ReportFilter,
    held_back,
    max_bundle_bytes,
)

BUNDLE_LINE_BYTES = 48 * 1024
"""Bundle bytes per `fks-bundle` line (`base64 -w 65536` in iteration.sh: 49152 bytes each)."""
_MAX_BUNDLE_LINE = 4 * BUNDLE_LINE_BYTES // 3 + 2


class LoggedBundle:
    """The export channel of a swarm task (`ExportChannel`): takes the bundle that
    iteration.sh prints on stderr (FKS_EXPORT_VIA=log, or log-small) out of that stream: lines
    `fks-bundle <nonce> <base64>`, in order, then `fks-bundle-end <nonce> <sha256 hex>`.

    Every other byte passes through untouched; only bytes that could still begin such a line
    are held back. The bundle is decoded into `dest` (a file of the host's making), bounded by
    `limit`, and its digest checked. Anything amiss (not base64, too big, a line after the end,
    a wrong digest, no end) fails the whole bundle: nothing is kept and `result()` says why.
    The agent can print such lines too (it can read the nonce); what it gains is a bundle of its
    own making, which it could make anyway: the host fetches it with fsck into one ref.
    """

    def __init__(self, nonce: str, dest: Path, *, limit: int | None = None) -> None:
        self._tokens = (f"fks-bundle {nonce} ".encode(), f"fks-bundle-end {nonce} ".encode())
        self._dest = dest
        self._limit = max_bundle_bytes() if limit is None else limit
        self._held = b""
        self._skipping = False  # inside an overlong bundle line: dropped up to its newline
        self._file: IO[bytes] | None = None
        self._digest = hashlib.sha256()
        self._size = 0
        self._seen = False
        self._ended = False
        self.error: str | None = None

    def feed(self, data: bytes) -> bytes:
        data, self._held = self._held + data, b""
        passed: list[bytes] = []
        while data:
            if self._skipping:
                end = data.find(b"\n")
                self._skipping = end < 0
                data = b"" if end < 0 else data[end + 1 :]
                continue
            found, token = self._first_token(data)
            if token is None:
                keep = max(held_back(data, t) for t in self._tokens)
                passed.append(data[: len(data) - keep])
                self._held = data[len(data) - keep :]
                break
            passed.append(data[:found])
            end = data.find(b"\n", found)
            if end < 0:
                if len(data) - found - len(token) > _MAX_BUNDLE_LINE:
                    self._fail("it holds a line that is too long")
                    self._skipping = True
                else:
                    self._held = data[found:]
                break
            self._line(token, data[found + len(token) : end])
            data = data[end + 1 :]
        return b"".join(passed)

    def _first_token(self, data: bytes) -> tuple[int, bytes | None]:
        hits = [(at, token) for token in self._tokens if (at := data.find(token)) >= 0]
        if not hits:
            return -1, None
        return min(hits)

    def _line(self, token: bytes, payload: bytes) -> None:
        if self.error is not None:
            return
        if len(payload) > _MAX_BUNDLE_LINE:
            self._fail("it holds a line that is too long")
        elif self._ended:
            self._fail("it has a line after its end")
        elif token == self._tokens[0]:
            self._chunk(payload)
        elif not self._seen:
            self._fail("it ends before it begins")
        elif payload.strip().lower() != self._digest.hexdigest().encode():
            self._fail("its sha256 is not the one announced")
        else:
            self._ended = True
            self._close()

    def _chunk(self, payload: bytes) -> None:
        try:
            data = base64.b64decode(payload.strip(), validate=True)
        except (binascii.Error, ValueError):
            self._fail("a line of it is not base64")
            return
        self._size += len(data)
        if self._size > self._limit:
            self._fail(
                f"it is larger than {self._limit} bytes; raise FKS_MAX_BUNDLE_BYTES if the "
                "agent really made that much"
            )
            return
        if self._file is None:
            self._file = self._dest.open("xb")
            self._seen = True
        self._digest.update(data)
        self._file.write(data)

    def _fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        self._close()
        if self._seen:
            self._dest.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def finish(self) -> bytes:
        """The stream ended: what was held back (a bundle line cut off fails the bundle)."""
        held, self._held = self._held, b""
        if any(held.startswith(token) for token in self._tokens):
            self._fail("it was cut off")
            return b""
        return held

    def result(self) -> Path | None:
        """The verified bundle (None: the stream carried none); ExportError if it failed."""
        if self.error is None and self._seen and not self._ended:
            self._fail("it has no end line (cut off)")
        if self.error is not None:
            raise ExportError(f"the iteration's bundle cannot be taken: {self.error}")
        return self._dest if self._seen else None

    def taken(self, report: ReportFilter) -> Export | None:
        """The export as reported, with the bundle the stream carried if the report names one;
        None without a report (then nothing can be fetched either: see `read_export`)."""
        reported = report.reported()
        if reported is None:
            return None
        bundle = self.result() if "bundle" in reported.values else None
        return Export(values=reported.values, bundle=bundle)


LOG_BUNDLE_BYTES = 1024 * 1024
"""The largest bundle a local container prints (FKS_EXPORT_VIA=log-small); a larger one is read
from the stopped container."""


class SmallInOutput:
    """The export channel of a local container (`ExportChannel`): a bundle of at most `limit`
    bytes comes in its output (`LoggedBundle`), a larger one (or an export whose report never
    came) is read from the stopped container (`taken` says None). The agent can print such
    lines too; what it gains is a bundle of its own making, as it could leave one in the
    container: the host fetches either with fsck into one ref."""

    def __init__(self, env: dict[str, str], nonce: str, dest: Path, limit: int) -> None:
        """Tells the iteration's script, through `env`, to print a bundle of up to `limit` bytes."""
        env["FKS_EXPORT_VIA"], env["FKS_LOG_BUNDLE_BYTES"] = "log-small", str(limit)
        self._logged = LoggedBundle(nonce, dest, limit=limit)

    def feed(self, data: bytes) -> bytes:
        return self._logged.feed(data)

    def finish(self) -> bytes:
        return self._logged.finish()

    def taken(self, report: ReportFilter) -> Export | None:
        reported = report.reported()
        if reported is None or "bundle" not in reported.values:
            return report.export()
        bundle = self._logged.result()
        return None if bundle is None else Export(values=reported.values, bundle=bundle)
