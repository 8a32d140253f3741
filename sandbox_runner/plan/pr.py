"""`pr` in forge/chains.json (top level or on a chain): where a run's landed branch goes as a
GitHub pull request. `pulls/` reads it; nothing here talks to GitHub."""

from __future__ import annotations

import re

from pydantic import Field, StrictBool, field_validator

from sandbox_runner.plan.model import ConfigModel

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class PrSettings(ConfigModel):
    """How a run's work becomes a pull request (`fks run --pr`, or set here)."""

    repo: str | None = None
    """`owner/name` on GitHub (default: from the remote's URL)."""
    api: str | None = None
    """GitHub's REST API (default: GITHUB_API_URL, else https://api.github.com; GitHub
    Enterprise: https://HOST/api/v3)."""
    remote: str | None = None
    """The git remote the branch is pushed to (default: origin)."""
    base: str | None = None
    """The branch the pull request asks to merge into (default: the run's base branch)."""
    branch: str | None = None
    """The branch the run's steps land on and that is pushed (default: fks/pr/<chain>)."""
    draft: StrictBool | None = None
    """Open it as a draft (default: true)."""
    enabled: StrictBool = Field(default=True)
    """False: settings only; `fks run --pr` opens one."""

    @field_validator("repo")
    @classmethod
    def _owner_name(cls, value: str | None) -> str | None:
        if value is not None and not _REPO.fullmatch(value):
            raise ValueError(f"{value!r} is not owner/name")
        return value

    @field_validator("api")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value


def merge_pr(*layers: PrSettings | None) -> PrSettings | None:
    """The top-level settings, then the chain's, field by field (None: neither has any)."""
    given = [layer for layer in layers if layer is not None]
    if not given:
        return None
    merged: dict[str, object] = {}
    for layer in given:
        merged.update(layer.model_dump(exclude_unset=True))
    return PrSettings.model_validate(merged)
