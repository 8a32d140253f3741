"""What `docker build` says, read: whole plain lines for the terminal, the images the build's
steps made (so a failed build can remove them), and its failure as one line, naming
`--ca-cert` when a TLS certificate was not trusted."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_STEP_IMAGE = re.compile(r" ---> ([0-9a-f]{12,64})")
_BUILT = re.compile(r"Successfully built ([0-9a-f]{12,64})")
# What curl, OpenSSL, Python, Node/npm, Go and apt say when a TLS certificate is not trusted:
# behind a TLS-intercepting proxy, its CA is missing from the image.
_UNTRUSTED = re.compile(
    r"certificate verify failed|SELF_SIGNED_CERT_IN_CHAIN|self[- ]signed certificate"
    r"|unable to (?:get local issuer|verify the first) certificate|UNABLE_TO_VERIFY_LEAF"
    r"|SSL certificate problem|x509: certificate signed by unknown authority"
    r"|Certificate verification failed|server certificate verification failed",
    re.IGNORECASE,
)
CA_CERT_HINT = (
    "a TLS certificate was not trusted; behind a TLS-intercepting proxy, pass its CA "
    "certificate with --ca-cert FILE (e.g. one of /usr/local/share/ca-certificates/*.crt)"
)
_SHOWN = 200


@dataclass
class BuildTrace:
    """What a build's output told about its images."""

    made: list[str] = field(default_factory=list)
    """Images the build's steps made (not taken from the cache, not a FROM's), in order."""
    image: str | None = None
    """The built image (the last step's)."""
    untrusted: str | None = None
    """The first line that says a TLS certificate was not trusted."""
    _cached: bool = True

    def see(self, line: str) -> None:
        """Note what one plain line of output tells."""
        if line.startswith("Step "):  # the Dockerfile's text, not what a step said
            instruction = line.partition(" : ")[2].lstrip().upper()
            self._cached = instruction.startswith("FROM ")
            return
        if line == " ---> Using cache":
            self._cached = True
        elif match := _STEP_IMAGE.fullmatch(line):
            self.image = match.group(1)
            if not self._cached:
                self.made.append(match.group(1))
            self._cached = True
        elif match := _BUILT.fullmatch(line):
            self.image = match.group(1)
        if self.untrusted is None and _UNTRUSTED.search(line):
            self.untrusted = line[:_SHOWN]

    def failure(self, error: str, said: str) -> SandboxError:
        """The build's failure as one line: an untrusted certificate names --ca-cert; a step
        that explains itself in one `fks: …` line (see layer/Dockerfile) gives that line."""
        if self.untrusted is not None:
            return SandboxError(f"docker build failed: {one_line(self.untrusted)}: {CA_CERT_HINT}")
        if said:
            return SandboxError(said)
        return SandboxError(
            f"docker build failed: {one_line(error)} (the build output above shows why; behind "
            "a TLS-intercepting proxy pass its CA with --ca-cert)"
        )


def build_lines(
    events: Iterable[dict[str, Any]], *, plain: bool, trace: BuildTrace | None = None
) -> Iterator[str]:
    """Whole lines from docker's build events, noted in `trace`; the first error event ends
    it with SandboxError."""
    trace = trace if trace is not None else BuildTrace()
    pending, said = "", ""
    for event in events:
        if "error" in event:
            if pending:
                trace.see(plain_line(pending))
                yield plain_line(pending) if plain else pending
            raise trace.failure(str(event["error"]), said)
        text = event.get("stream")
        if text is None and "status" in event:  # FROM pulling a missing base, cache import
            text = f"{event['status']} {event.get('progress', '')}".rstrip() + "\n"
        if not text:
            continue
        pending += text
        *complete, pending = pending.split("\n")
        for line in complete:
            shown = plain_line(line)  # stderr comes wrapped in colour codes
            trace.see(shown)
            if shown.startswith("fks: "):
                said = one_line(shown[len("fks: ") :])
            yield shown if plain else line
    if pending:
        trace.see(plain_line(pending))
        yield plain_line(pending) if plain else pending


def plain_line(line: str) -> str:
    """What a terminal would finally show of `line`, minus escape sequences and controls."""
    line = strip_escapes(line)
    redrawn = [part for part in line.split("\r") if part]
    return _CONTROL.sub("", redrawn[-1] if redrawn else "")


def isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
