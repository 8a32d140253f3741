"""Reading a config file's JSON: bounded in size, UTF-8, and strict (a key given twice or a
NaN is a mistake to name, not a value to pick); every problem is one `ConfigError` that names
the file and says what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sandbox_runner.bounded import LimitExceeded, load_json
from sandbox_runner.errors import ConfigError

CONFIG_BYTES = 16 << 20
"""Bytes of a config read at most (a repository can ship any file as its config)."""


def read_config_json(path: Path, shown: str, *, required: bool, needed_by: str) -> Any:
    """The file's JSON (None when it does not exist and is not `required`)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(CONFIG_BYTES + 1)
        if len(data) > CONFIG_BYTES:
            raise ConfigError(f"{shown}: over {CONFIG_BYTES >> 20} MiB, too large to be a config")
        text = data.decode("utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigError(
                f"{shown} not found; {needed_by} needs a config (create it, or run 'fks init')"
            ) from None
        return None
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown}: not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        return load_json(
            text,
            max_bytes=CONFIG_BYTES,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except LimitExceeded as exc:
        raise ConfigError(
            f"{shown}: JSON is nested too deeply to be a config ({exc}); check the file"
        ) from None
    except _StrictJsonError as exc:
        raise ConfigError(f"{shown}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{shown}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


class _StrictJsonError(ValueError):
    """JSON that Python's parser accepts but a config must not contain."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: one of the user's settings would vanish.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJsonError(f"key {key!r} appears twice in one object; remove one")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _StrictJsonError(f"{name} is not a JSON number; use a finite number")


def shown_path(path: Path, cwd: Path) -> str:
    """`path` as messages show it: relative to `cwd` when it is inside."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)
