"""Who may talk to `fks ui`: only requests carrying its token (in the URL it printed, then in a
cookie) and, when they say where they come from, from its own origin (no cross-site posts);
Starlette's TrustedHostMiddleware (in `app`) refuses other host names (no DNS rebinding). Every answer gets a strict Content Security Policy: scripts,
styles and images from the app itself only, nothing inline, nothing from anywhere else."""

from __future__ import annotations

import hmac
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
    """The token and the address `fks ui` listens on."""

    token: str
    port: int

    @property
    def cookie(self) -> str:
        return f"fks_ui_{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/?{TOKEN_PARAM}={self.token}"


class GuardMiddleware:
    """Refuses (403, one line) what `Guard` does not allow; a valid token in the URL becomes a
    cookie (SameSite=Strict, HttpOnly) and the URL is reloaded without it."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope, headers)
        if refused is not None:
            await _answer(send, 403, refused.encode(), [(b"content-type", b"text/plain")])
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if any(name == TOKEN_PARAM for name, _ in query):
            await self._set_cookie_and_reload(scope, send, query)
            return
        await self.app(scope, receive, _with_headers(send))

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> str | None:
        origin = headers.get("origin")
        if origin is not None and origin not in self.guard.origins:
            return "fks ui: refused: a request from another site"
        same_site = headers.get("sec-fetch-site", "same-origin") == "same-origin"
        if scope["method"] not in _SAFE_METHODS and (origin is None or not same_site):
            return "fks ui: refused: a change must come from fks ui's own pages"
        if not self._has_token(scope, headers):
            return "fks ui: refused: open the URL that `fks ui` printed (it carries the token)"
        return None

    def _has_token(self, scope: Scope, headers: dict[str, str]) -> bool:
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = [value for name, value in query if name == TOKEN_PARAM]
        cookies = _cookies(headers.get("cookie", ""))
        given += [cookies[self.guard.cookie]] if self.guard.cookie in cookies else []
        return bool(given) and all(
            hmac.compare_digest(value.encode(), self.guard.token.encode()) for value in given
        )

    async def _set_cookie_and_reload(
        self, scope: Scope, send: Send, query: list[tuple[str, str]]
    ) -> None:
        rest = urlencode([(n, v) for n, v in query if n != TOKEN_PARAM])
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = f"{self.guard.cookie}={self.guard.token}; Path=/; HttpOnly; SameSite=Strict"
        await _answer(
            send,
            303,
            b"",
            [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
        )


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
