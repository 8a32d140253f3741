"""`notify` in `forge/chains.json`: where fks tells people what happened (Apprise URLs), on
which events and from which level. A URL holds a token: it is a secret, read where it is
given (the file, or a variable of fks's environment), masked wherever fks writes or shows
text, and never passed into a container.

Entries are checked for their form when the config is read (`NotifyEntry`); each URL is
parsed by Apprise before anything starts (`resolve_targets`), which is imported only then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, model_validator

from sandbox_runner.errors import ConfigError
from sandbox_runner.outcomes import IterationEnd, Status
from sandbox_runner.plan.model import ConfigModel


class NotifyEvent(StrEnum):
    """What a notification tells of (`events` of a `notify` entry; `event` of a delivery in
    run.json). A run's end is `run_end`, and also `failed`, `budget` or `auth_error` when it
    ended so (named as the outcomes they tell of)."""

    RUN_END = "run_end"
    FAILED = Status.FAILED.value
    BUDGET = IterationEnd.BUDGET.value
    AUTH_ERROR = IterationEnd.AUTH_ERROR.value
    QUESTION = "question"
    """A forge task waits for an answer."""
    REVIEW = "review"
    """A forge review gave its verdict."""
    PR = "pr"
    """A pull request was opened or updated."""


EVENTS = tuple(NotifyEvent)
_EventName = Annotated[
    NotifyEvent, WithJsonSchema({"type": "string", "enum": [e.value for e in EVENTS]})
]
LevelName = Literal["info", "warning", "failure"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MIN_PART = 8
"""Parts of a URL at least this long are masked on their own too (tokens, topics, keys)."""
_URL_LIMIT = 4096


class Level(IntEnum):
    """How much a notification asks for attention; a target gets those at its level or above."""

    INFO = 1
    WARNING = 2
    FAILURE = 3

    @classmethod
    def named(cls, name: str) -> Level:
        return cls[name.upper()]


class NotifyEntry(ConfigModel):
    """One place notifications go: an Apprise URL (given here or in a variable) and a filter."""

    url: str | None = Field(default=None, min_length=1, max_length=_URL_LIMIT)
    """An Apprise URL (`ntfys://TOPIC`, `slack://…`, `json://HOST/PATH`, `mailto://…`: see
    Apprise's list of services). It holds a token: anyone who can read this file (agents
    working in the repository among them) can read it; prefer `env`."""
    env: str | None = None
    """The variable of fks's environment that holds the URL (it is never passed to an agent's
    container; naming it in `sandbox.env` is refused)."""
    events: tuple[_EventName, ...] = EVENTS
    """The events sent here (default: all): `run_end`, `failed`, `budget`, `auth_error`,
    `question`, `review`, `pr`."""
    level: LevelName = "info"
    """The least a notification must weigh to be sent here: `info` (all), `warning` (stops,
    questions, rejections and failures) or `failure` (failures only)."""

    @model_validator(mode="before")
    @classmethod
    def _url_alone(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> NotifyEntry:
        if (self.url is None) == (self.env is None):
            raise ValueError("give exactly one of 'url' and 'env'")
        if self.env is not None and not _ENV_NAME.fullmatch(self.env):
            raise ValueError(f"{self.env!r} is not a variable name")
        if not self.events:
            raise ValueError("'events' lists none; leave it out for all")
        return self


def url_or_entry(schema: dict[str, Any]) -> None:
    """The JSON Schema of `notify`: each item is a URL alone, or an entry."""
    schema["items"] = {"anyOf": [{"type": "string", "minLength": 1}, schema["items"]]}


@dataclass(frozen=True)
class Target:
    """A notify entry with its URL read and parsed: where one notification goes."""

    index: int
    """Its place in `notify` (shown instead of the URL)."""
    url: str = field(repr=False)
    service: str
    """The URL's scheme (`ntfy`, `json`, `slack`…): what may be shown and recorded of it."""
    events: frozenset[str]
    level: Level

    def wants(self, events: frozenset[str], level: Level) -> bool:
        return bool(self.events & events) and level >= self.level


def resolve_targets(
    entries: Sequence[NotifyEntry],
    environ: Mapping[str, str] | None = None,
    *,
    container_env: Sequence[str] = (),
) -> tuple[Target, ...]:
    """Each entry's URL read and parsed by Apprise; ConfigError (one line naming the entry and
    the fix, never the URL) for an unset variable, a variable that would enter a container
    (`container_env`: the names `sandbox.env` passes), or a URL Apprise cannot use."""
    if not entries:
        return ()
    environ = os.environ if environ is None else environ
    return tuple(_resolve(i, e, environ, container_env) for i, e in enumerate(entries))


def _resolve(
    index: int, entry: NotifyEntry, environ: Mapping[str, str], container_env: Sequence[str]
) -> Target:
    where = f"notify[{index}]"
    if entry.env is not None:
        if entry.env in container_env:
            raise ConfigError(
                f"{where}: {entry.env} is in sandbox.env, which passes it into the agents' "
                "containers; a notification URL must stay on this machine: remove it there"
            )
        url = environ.get(entry.env, "").strip()
        if not url:
            raise ConfigError(
                f"{where}: environment variable {entry.env} is not set; export the Apprise URL "
                "in it before running fks (or remove the entry)"
            )
        where = f"{where} (env {entry.env})"
    else:
        url = (entry.url or "").strip()
    service = scheme(url)
    if not _parses(url):
        raise ConfigError(
            f"{where}: Apprise cannot use this {service or 'schemeless'} URL; check it against "
            "Apprise's services (https://github.com/caronc/apprise/wiki)"
        )
    return Target(index, url, service, frozenset(entry.events), Level.named(entry.level))


def _parses(url: str) -> bool:
    if len(url) > _URL_LIMIT or any(c.isspace() or ord(c) < 0x20 for c in url):
        return False
    import apprise  # about half a second: only runs with notifications pay it

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


def scheme(url: str) -> str:
    """The scheme of `url`, lower-cased (empty when it has none a scheme may be)."""
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]{0,31})://", url)
    return found[1].lower() if found else ""


def url_secrets(urls: Sequence[str]) -> list[str]:
    """What to mask of notification URLs: each whole, and each part of one that could be a
    token on its own (user, password, host, path and query parts of at least 8 characters
    that are not plain host names)."""
    found: set[str] = set()
    for url in urls:
        found.add(url)
        rest = url.split("://", 1)[-1]
        for part in re.split(r"[/?&=:@#,]+", rest):
            if len(part) >= _MIN_PART and not _plain_host(part):
                found.add(part)
    return sorted(found, key=len, reverse=True)


def _plain_host(part: str) -> bool:
    """A dotted host name or address (`ntfy.sh`, `127.0.0.1`): a place, not a secret."""
    return "." in part and bool(re.fullmatch(r"[A-Za-z0-9.-]+", part)) and part[-1] != "."


def entry_urls(
    entries: Sequence[NotifyEntry], environ: Mapping[str, str] | None = None
) -> list[str]:
    """The URLs of `entries` as they are set now (unset variables left out): what to mask."""
    environ = os.environ if environ is None else environ
    urls = [e.url if e.url is not None else environ.get(e.env or "", "") for e in entries]
    return [u.strip() for u in urls if u and u.strip()]
