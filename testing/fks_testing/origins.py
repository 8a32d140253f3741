"""Local HTTPS origins for the secrets tests, offline: an origin that wants one header
(`HttpsOrigin`) and a smart-HTTP git server that wants one Basic credential
(`GitHttpsServer`), each with its own CA for the names it is given, recording every request.

Both listen on all addresses by default so that a container reaches them through the bridge
gateway; their requests come from the agent's side of the proxy, so every size is bounded.
"""

from __future__ import annotations

import base64
import hmac
import http.server
import io
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

import trustme

BODY_LIMIT = 1 << 20  # bytes of a request body an origin reads at most
GIT_BODY_LIMIT = 64 << 20  # a push's pack
_CGI_OUTPUT_LIMIT = 256 << 20
_LINE_LIMIT = 4096  # a chunk-size or trailer line
_TRAILERS_LIMIT = 100
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,8}")
_BAD_IN_URL = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True)
class Request:
    """One request an origin got, as it came (after TLS): every header in order, repeats kept."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> list[str]:
        """Every value of header `name` (any case), in the order they came."""
        return [value for key, value in self.headers if key.lower() == name.lower()]

    @property
    def host(self) -> str | None:
        values = self.header("Host")
        return values[0] if values else None


class Response(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _Refused(Exception):
    """A request the origin answers with `status` and closes the connection after."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def read_body(rfile: io.BufferedIOBase, fields: Message, limit: int) -> bytes:
    """The body of the request whose header `fields` came, `limit` bytes at most, chunked or
    not; anything ambiguous (both framings, repeated lengths) is refused."""
    encoding = fields.get_all("Transfer-Encoding") or []
    lengths = fields.get_all("Content-Length") or []
    if encoding:
        if [e.strip().lower() for e in encoding] != ["chunked"] or lengths:
            raise _Refused(400, "Transfer-Encoding other than one 'chunked', or with a length")
        return _read_chunked(rfile, limit)
    if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
        raise _Refused(400, "Content-Length repeated or not a number")
    length = int(lengths[0]) if lengths else 0
    if length > limit:
        raise _Refused(413, f"body over {limit} bytes")
    body = rfile.read(length)
    if len(body) != length:
        raise _Refused(400, "body shorter than its Content-Length")
    return body


def _read_chunked(rfile: io.BufferedIOBase, limit: int) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(_LINE_LIMIT + 1)
        size_text = line.split(b";", 1)[0].strip()
        if len(line) > _LINE_LIMIT or not _CHUNK_SIZE.fullmatch(size_text):
            raise _Refused(400, "malformed chunk size")
        size = int(size_text, 16)
        if len(body) + size > limit:
            raise _Refused(413, f"body over {limit} bytes")
        if size == 0:
            break
        chunk = rfile.read(size)
        if len(chunk) != size or rfile.readline(3) not in (b"\r\n", b"\n"):
            raise _Refused(400, "malformed chunk")
        body += chunk
    for _ in range(_TRAILERS_LIMIT):
        line = rfile.readline(_LINE_LIMIT + 1)
        if line in (b"\r\n", b"\n", b""):
            return bytes(body)
        if len(line) > _LINE_LIMIT:
            raise _Refused(400, "trailer line too long")
    raise _Refused(400, "too many trailers")


class _Handler(http.server.BaseHTTPRequestHandler):
    """Reads any method's request (bounded), records it, and sends what the origin answers."""

    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client that stops sending mid-request is dropped

    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def _dispatch(self) -> None:
        origin = self.server.origin
        try:
            body = read_body(self.rfile, self.headers, origin.body_limit)
        except _Refused as refused:
            origin._record(Request(self.command, self.path, tuple(self.headers.items()), b""))
            self.close_connection = True
            self._send(Response(refused.status, [("Connection", "close")], str(refused).encode()))
            return
        request = Request(self.command, self.path, tuple(self.headers.items()), body)
        origin._record(request)
        self._send(origin.answer(request))

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, bind: str, origin: _TlsOrigin, context: ssl.SSLContext) -> None:
        self.origin = origin
        super().__init__((bind, 0), _Handler)
        # The handshake happens on the handler thread's first read, so a client that never
        # finishes it holds its own thread only, not the accepting one.
        self.socket = context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that do not trust the CA, or hang up: expected in these tests


class _TlsOrigin:
    """An HTTPS server on a free port with a CA of its own, made for `names`, while in a
    `with` block; subclasses say what it answers."""

    body_limit = BODY_LIMIT

    def __init__(self, names: Sequence[str], bind: str) -> None:
        if not names:
            raise ValueError("an origin needs at least one name")
        self.names = tuple(names)
        self.bind = bind
        self._ca = trustme.CA(organization_name="fks test origin")
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate (PEM) that the origin's certificate chains to."""
        return self._ca.cert_pem.bytes()

    @property
    def ca_path(self) -> Path:
        """A file holding `ca_pem`, for `sandbox.caCerts`, curl's `--cacert`, git's sslCAInfo."""
        return self.workdir / "ca.pem"

    @property
    def workdir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the origin is not running: use it in a `with` block")
        return Path(self._dir.name)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the origin is not running: use it in a `with` block")
        return int(self._server.server_address[1])

    def url(self, path: str = "/", name: str | None = None) -> str:
        return f"https://{name or self.names[0]}:{self.port}{path}"

    @property
    def requests(self) -> list[Request]:
        """Every request so far, in the order they came (a copy)."""
        with self._lock:
            return list(self._requests)

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def answer(self, request: Request) -> Response:
        raise NotImplementedError

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.set_alpn_protocols(["http/1.1"])
        self._ca.issue_cert(*self.names).configure_cert(context)
        return context

    def __enter__(self) -> Self:
        self._dir = tempfile.TemporaryDirectory(prefix="fks-origin-")
        try:
            self._ca.cert_pem.write_to_path(str(self.ca_path))
            self._prepare()
            self._server = _Server(self.bind, self, self._context())
        except BaseException:
            self._dir.cleanup()
            raise
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _prepare(self) -> None:
        """What a subclass sets up in `workdir` before the server listens."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        if self._dir is not None:
            self._dir.cleanup()
        self._server = self._thread = self._dir = None


def _reflect(request: Request) -> bytes:
    lines = [f"{request.method} {request.path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in request.headers]
    return ("\r\n".join(lines) + "\r\n").encode("utf-8", "surrogateescape")


class HttpsOrigin(_TlsOrigin):
    """An API that wants `header: value` (e.g. `Authorization: Bearer s3cret`).

    Routes: `/echo` and any TRACE reflect the request's line and headers (a reflecting
    origin, the way a secret would leak back); `/redirect?to=URL` is a 302 to URL; any other
    path is 200 `ok` with exactly one `header` equal to `value`, else 401.
    """

    def __init__(
        self,
        names: Sequence[str] = ("origin.test",),
        *,
        header: str = "Authorization",
        value: str = "Bearer s3cret",
        bind: str = "0.0.0.0",
    ) -> None:
        super().__init__(names, bind)
        self.header = header
        self.value = value

    def answer(self, request: Request) -> Response:
        route = urllib.parse.urlsplit(request.path)
        text = [("Content-Type", "text/plain")]
        if request.method == "TRACE" or route.path == "/echo":
            return Response(200, [("Content-Type", "message/http")], _reflect(request))
        if route.path == "/redirect":
            targets = urllib.parse.parse_qs(route.query).get("to", [])
            if len(targets) != 1 or _BAD_IN_URL.search(targets[0]):
                return Response(400, text, b"redirect wants one ?to=URL\n")
            return Response(302, [*text, ("Location", targets[0])], b"see other\n")
        if _one_equal(request.header(self.header), self.value):
            return Response(200, text, b"ok\n")
        return Response(401, text, b"unauthorized\n")


def _one_equal(values: list[str], expected: str) -> bool:
    return len(values) == 1 and hmac.compare_digest(values[0].encode(), expected.encode())


class GitHttpsServer(_TlsOrigin):
    """Bare repositories over smart HTTP (`git http-backend`: fetch and push) for
    `Authorization: Basic base64(user:token)` only; `repo` starts with one commit on `main`.
    """

    body_limit = GIT_BODY_LIMIT

    def __init__(
        self,
        names: Sequence[str] = ("git.test",),
        *,
        user: str = "x-access-token",
        token: str = "s3cret",
        repo: str = "repo.git",
        bind: str = "0.0.0.0",
    ) -> None:
        super().__init__(names, bind)
        self.user = user
        self.token = token
        self.repo = repo

    @property
    def authorization(self) -> str:
        """The one `Authorization` value the server accepts."""
        return "Basic " + base64.b64encode(f"{self.user}:{self.token}".encode()).decode()

    @property
    def root(self) -> Path:
        """GIT_PROJECT_ROOT: the folder the repositories are in."""
        return self.workdir / "repos"

    @property
    def repo_path(self) -> Path:
        """The bare repository, to look at what was pushed (`branch`)."""
        return self.root / self.repo

    @property
    def clone_url(self) -> str:
        return self.url(f"/{self.repo}")

    def branch(self, name: str) -> str | None:
        """The commit branch `name` of the bare repository points at, or None."""
        ref = f"refs/heads/{name}^{{commit}}"
        done = subprocess.run(
            ["git", "--git-dir", str(self.repo_path), "rev-parse", "-q", "--verify", ref],
            env=self._git_env(),
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    def _git_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.workdir),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "fks test",
            "GIT_AUTHOR_EMAIL": "origin@fks.test",
            "GIT_COMMITTER_NAME": "fks test",
            "GIT_COMMITTER_EMAIL": "origin@fks.test",
        }

    def _prepare(self) -> None:
        bare, work = self.repo_path, self.workdir / "seed"
        work.mkdir()
        (work / "README").write_text("seeded by the test git server\n")
        for argv in (
            ["init", "-q", "--bare", "-b", "main", str(bare)],
            ["--git-dir", str(bare), "config", "http.receivepack", "true"],
            ["--git-dir", str(bare), "config", "receive.fsckObjects", "true"],
            ["init", "-q", "-b", "main", str(work)],
            ["-C", str(work), "add", "README"],
            ["-C", str(work), "commit", "-q", "-m", "Seed"],
            ["-C", str(work), "push", "-q", str(bare), "main"],
        ):
            subprocess.run(["git", *argv], env=self._git_env(), check=True, capture_output=True)
        shutil.rmtree(work)

    def answer(self, request: Request) -> Response:
        if not _one_equal(request.header("Authorization"), self.authorization):
            challenge = [("WWW-Authenticate", 'Basic realm="fks test git"')]
            return Response(401, challenge, b"unauthorized\n")
        route = urllib.parse.urlsplit(request.path)
        env = {
            **self._git_env(),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": urllib.parse.unquote(route.path),
            "QUERY_STRING": route.query,
            "CONTENT_TYPE": (request.header("Content-Type") or [""])[0],
            "CONTENT_LENGTH": str(len(request.body)),
            "REMOTE_USER": self.user,
            "REMOTE_ADDR": "127.0.0.1",
        }
        for name, variable in (
            ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ("Git-Protocol", "HTTP_GIT_PROTOCOL"),
        ):
            if values := request.header(name):
                env[variable] = values[0]
        done = subprocess.run(
            ["git", "http-backend"], input=request.body, env=env, capture_output=True, timeout=300
        )
        if done.returncode != 0 or len(done.stdout) > _CGI_OUTPUT_LIMIT:
            return Response(500, [], done.stderr[-2000:])
        return _cgi_response(done.stdout)


def _cgi_response(output: bytes) -> Response:
    """An HTTP response from a CGI program's output: headers, a blank line, the body."""
    match = re.search(rb"\r?\n\r?\n", output)
    if match is None:
        return Response(500, [], b"no end of headers from git http-backend\n")
    status, headers = 200, []
    for line in output[: match.start()].decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name.lower() not in ("content-length", "connection", "transfer-encoding"):
            headers.append((name, value.strip()))
    return Response(status, headers, output[match.end() :])
