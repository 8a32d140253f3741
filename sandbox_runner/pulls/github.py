"""GitHub's REST API as fks uses it: httpx, with tenacity waiting out what GitHub asks to be
waited out (a 502, a secondary rate limit's `Retry-After`, a primary one's reset), within a
bound; everything else is one line (`GitHubError`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from sandbox_runner.errors import FksError

if TYPE_CHECKING:
    import httpx

DEFAULT_API = "https://api.github.com"
MAX_WAIT = 300.0
"""Seconds fks waits for one rate limit to pass; a longer one is an error (`fks pr RUN` later)."""
_ATTEMPTS = 6
_SERVER_ERRORS = frozenset({500, 502, 503, 504})
_MESSAGE = 300


class GitHubError(FksError):
    """GitHub refused or failed a request: one line saying which and why."""

    def __init__(self, message: str, status: int | None = None, errors: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors
        """The texts of a 422's `errors` (how "already exists" and "no commits" are told)."""


class _Again(Exception):
    """An answer worth another try, after `wait` seconds."""

    def __init__(self, why: str, wait: float) -> None:
        super().__init__(why)
        self.why, self.wait = why, wait


class GitHub:
    """Requests to GitHub's REST API at `api` with `token`; `notice` hears of each wait."""

    def __init__(
        self,
        api: str,
        token: str,
        *,
        notice: Callable[[str], None] = lambda _text: None,
        max_wait: float = MAX_WAIT,
        backoff: float = 1.0,
    ) -> None:
        import httpx  # loaded by runs that open a pull request, not by every `fks run`

        self._client = httpx.Client(
            base_url=api.rstrip("/"),
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "fks",
            },
            timeout=30.0,
            follow_redirects=False,
        )
        self._notice, self._max_wait, self._backoff = notice, max_wait, backoff

    def close(self) -> None:
        self._client.close()

    def request(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None
    ) -> Any:
        """The JSON GitHub answers `method path` with, waits and retries included."""
        retrying = Retrying(
            retry=retry_if_exception_type(_Again),
            wait=_wait_asked,
            stop=stop_after_attempt(_ATTEMPTS),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            return retrying(self._once, method, path, json, params)
        except _Again as exc:
            raise GitHubError(f"GitHub: {method} {path}: {exc.why} ({_ATTEMPTS} tries)") from None

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Again):
            self._notice(f"GitHub: {exc.why}; trying again in {exc.wait:.0f}s")

    def _once(self, method: str, path: str, body: Any, params: Mapping[str, str] | None) -> Any:
        import httpx

        try:
            answer = self._client.request(method, path, json=body, params=params)
        except httpx.TransportError as exc:
            raise _Again(f"no answer ({type(exc).__name__})", self._backoff) from None
        if answer.status_code < 300:
            try:
                return answer.json() if answer.content else None
            except ValueError:
                raise GitHubError(
                    f"GitHub: {method} {path}: {answer.status_code} with an answer that is not "
                    f"JSON; is {self._client.base_url} GitHub's REST API?",
                    answer.status_code,
                ) from None
        wait = self._rate_limited(answer)
        if wait is not None:
            if wait > self._max_wait:
                raise GitHubError(
                    f"GitHub: {method} {path}: rate limited for {wait:.0f}s more, longer than "
                    f"fks waits ({self._max_wait:.0f}s); try again later with fks pr RUN",
                    answer.status_code,
                )
            raise _Again(f"rate limited ({answer.status_code})", wait)
        if answer.status_code in _SERVER_ERRORS:
            raise _Again(f"{answer.status_code} from the server", self._backoff)
        message, errors = _message(answer)
        raise GitHubError(
            f"GitHub: {method} {path}: {answer.status_code} {message}{_fix(answer.status_code)}",
            answer.status_code,
            errors,
        )

    def _rate_limited(self, answer: httpx.Response) -> float | None:
        """Seconds to wait before GitHub takes requests again (None: not a rate limit)."""
        if answer.status_code not in (403, 429):
            return None
        headers = answer.headers
        if headers.get("retry-after", "").strip().isdigit():
            return float(headers["retry-after"].strip())
        if headers.get("x-ratelimit-remaining") == "0":
            reset = headers.get("x-ratelimit-reset", "").strip()
            return max(1.0, float(reset) - time.time()) if reset.isdigit() else 60.0
        if "rate limit" in _message(answer)[0].lower():
            return 60.0  # a secondary limit that named no time: GitHub asks for a minute
        return None


def _wait_asked(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    if not isinstance(exc, _Again):
        return 0.0
    return exc.wait * (1 if "rate limited" in exc.why else 2 ** (state.attempt_number - 1))


def _message(answer: httpx.Response) -> tuple[str, str]:
    """GitHub's `message` and the texts of its `errors`, each bounded, on one line."""
    try:
        data = answer.json()
    except ValueError:
        return answer.reason_phrase or "(no message)", ""
    if not isinstance(data, dict):
        return "(no message)", ""
    errors = data.get("errors")
    if not isinstance(errors, list):
        errors = []
    texts = [str(e.get("message", "")) for e in errors if isinstance(e, dict)]
    flat = " ".join(f"{data.get('message', '(no message)')} {'; '.join(texts)}".split())
    return flat[:_MESSAGE], " ".join(" ".join(texts).split())[:_MESSAGE]


def _fix(status: int) -> str:
    if status == 401:
        return " (the token was refused: set GITHUB_TOKEN or GH_TOKEN, or run gh auth login)"
    if status == 403:
        return " (the token may not write to this repository)"
    return ""
