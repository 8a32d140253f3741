"""Secret masking: values of passed-through credential variables never reach logs or screens."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sandbox_runner.agentclis.registry import KEY_VARS

if TYPE_CHECKING:
    from sandbox_runner.plan.sandbox import SandboxSettings

MASK = b"********"
# Shorter values would mask ordinary words; real credentials are far longer.
_MIN_SECRET = 6


def secrets_from_env(names: Iterable[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The values to mask: credential variables plus the configured pass-through names."""
    env = os.environ if env is None else env
    values = {env[n] for n in (*KEY_VARS, *names) if env.get(n, "")}
    return sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)


def masked_names(settings: SandboxSettings | None) -> list[str]:
    """Variables whose values are masked for a run with these settings: `sandbox.env`'s and the
    secrets' sources (their values never enter a container; should an origin echo one back to
    the agent, it still never reaches a log)."""
    if settings is None:
        return []
    return [*settings.env, *(entry.env for entry in settings.secrets if entry.env)]


class Masker:
    """Replaces secret values in a byte stream, including values split across chunks.

    Only the end of the data that could still be the start of a secret is held back, so output
    that cannot be part of a secret is never delayed (and a killed run loses nothing it printed).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = [s.encode() for s in secrets if s]
        self._keep = max((len(s) for s in self._secrets), default=1) - 1
        self._first_bytes = {s[0] for s in self._secrets}
        self._pending = b""

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def feed(self, chunk: bytes) -> bytes:
        """Masked bytes that are safe to emit; a possible secret prefix at the end is held back."""
        if not self._secrets:
            return chunk
        data = self._mask(self._pending + chunk)
        cut = self._undecided_from(data)
        self._pending = data[cut:]
        return data[:cut]

    def _undecided_from(self, data: bytes) -> int:
        """Where the longest suffix of `data` that is a proper prefix of a secret starts."""
        for start in range(max(0, len(data) - self._keep), len(data)):
            if data[start] not in self._first_bytes:
                continue
            tail = data[start:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self._secrets):
                return start
        return len(data)

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._mask(rest)

    def mask_text(self, text: str) -> str:
        """Mask a whole string (for records and messages)."""
        if not self._secrets:
            return text
        return self._mask(text.encode()).decode("utf-8", "replace")

    def _mask(self, data: bytes) -> bytes:
        for secret in self._secrets:
            if secret in data:
                data = data.replace(secret, MASK)
        return data
