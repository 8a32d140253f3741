"""Who may talk to `fks ui`: only requests carrying its token (in the URL it printed, then in a
cookie) and, when they say where they come from, from its own origin (no cross-site posts);
Starlette's TrustedHostMiddleware (in `app`) refuses other host names (no DNS rebinding).

The pages are served under a host name of their own, `fks-<random>.localhost` (browsers resolve
`.localhost` names to this machine themselves): cookies are scoped by host name, not by port, so
a cookie set for 127.0.0.1 would go to every other server on 127.0.0.1 the browser visits. The
same URL on 127.0.0.1 or localhost only moves a holder of the token to that name.

Every answer gets a strict Content Security Policy: scripts, styles and images from the app
itself only, nothing inline, nothing from anywhere else."""

from __future__ import annotations

import hmac
import html
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_PARAM = "token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it, browsers send `Origin: null` with the pages' own form posts,
    # which the guard must then refuse. same-origin still tells no other site anything.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
_SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Guard:
    """The token, and the host name and port the pages are served on."""

    token: str
    port: int
    name: str
    """A host name of this `fks ui` alone under `.localhost`: no other server's pages are served
    for it, so its cookie reaches no one else."""

    @classmethod
    def fresh(cls, port: int) -> Guard:
        """A new token and host name (128 bits each at least) for `port`."""
        return cls(secrets.token_urlsafe(24), port, f"fks-{secrets.token_hex(16)}.localhost")

    @property
    def cookie(self) -> str:
        return f"fks_ui_{self.port}"

    @property
    def host(self) -> str:
        """The `Host` the pages are served for."""
        return f"{self.name}:{self.port}"

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    def url(self) -> str:
        return f"{self.origin}/?{TOKEN_PARAM}={self.token}"


class GuardMiddleware:
    """Refuses (403, one line) what `Guard` does not allow; a valid token in the URL becomes a
    cookie (SameSite=Strict, HttpOnly, for the guard's host name only) and the URL is reloaded
    without it (the page it gets goes on to the same URL without the token). On another name of the same port (127.0.0.1, localhost) a valid token only
    moves the browser to the guard's host name."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        refused = self._refusal(scope, headers, query)
        if refused is not None:
            await _answer(send, 403, refused.encode(), [(b"content-type", b"text/plain")])
        elif headers.get("host") != self.guard.host:
            await _redirect(send, self.guard.origin + _target(scope, query))
        elif any(name == TOKEN_PARAM for name, _ in query):
            await self._set_cookie_and_reload(scope, send, query)
        else:
            await self.app(scope, receive, _with_headers(send))

    def _refusal(
        self, scope: Scope, headers: dict[str, str], query: list[tuple[str, str]]
    ) -> str | None:
        origin = headers.get("origin")
        if origin is not None and origin != self.guard.origin:
            return "fks ui: refused: a request from another site"
        same_site = headers.get("sec-fetch-site", "same-origin") == "same-origin"
        if scope["method"] not in _SAFE_METHODS and (origin is None or not same_site):
            return "fks ui: refused: a change must come from fks ui's own pages"
        # Under another name a cookie is never asked for: a browser would send it to every
        # server under that name.
        served_here = headers.get("host") == self.guard.host
        if not self._has_token(headers, query, cookie=served_here):
            return "fks ui: refused: open the URL that `fks ui` printed (it carries the token)"
        return None

    def _has_token(
        self, headers: dict[str, str], query: list[tuple[str, str]], *, cookie: bool
    ) -> bool:
        given = [value for name, value in query if name == TOKEN_PARAM]
        cookies = _cookies(headers.get("cookie", "")) if cookie else {}
        given += [cookies[self.guard.cookie]] if self.guard.cookie in cookies else []
        return bool(given) and all(
            hmac.compare_digest(value.encode(), self.guard.token.encode()) for value in given
        )

    async def _set_cookie_and_reload(
        self, scope: Scope, send: Send, query: list[tuple[str, str]]
    ) -> None:
        # A page that goes on by itself rather than a redirect: a browser sends a SameSite=Strict
        # cookie on a redirect only when the first request came from the same site, which a
        # link clicked elsewhere or the file `fks ui --open` opens is not.
        rest = [(n, v) for n, v in query if n != TOKEN_PARAM]
        target = html.escape(self.guard.origin + _target(scope, rest), quote=True)
        page = (
            '<!DOCTYPE html><html><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={target}"><title>fks ui</title></head>'
            f'<body><p><a href="{target}">fks ui</a></p></body></html>\n'
        )
        cookie = f"{self.guard.cookie}={self.guard.token}; Path=/; HttpOnly; SameSite=Strict"
        headers = [(b"content-type", b"text/html; charset=utf-8"), (b"set-cookie", cookie.encode())]
        await _answer(send, 200, page.encode(), headers)


def _target(scope: Scope, query: list[tuple[str, str]]) -> str:
    """The request's path as it was sent (still percent-encoded), with `query`."""
    raw: bytes = scope.get("raw_path") or scope.get("path", "/").encode()
    rest = urlencode(query)
    return raw.decode("latin-1") + (f"?{rest}" if rest else "")


async def _redirect(
    send: Send, location: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await _answer(send, 303, b"", [(b"location", location.encode()), *(headers or [])])


def _cookies(header: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            found.setdefault(name, value)
    return found


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *HEADERS]
        await send(message)

    return sending


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, *HEADERS, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
