"""What the swarm's nodes fetch from this machine: a workspace's base, as a pack served over
HTTP (`PackServer`: one random path per pack, on the address the swarm knows the manager by
(`manager_address`), for as long as the load takes). A task on another node cannot be handed
a file through the API."""

from __future__ import annotations

import contextlib
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from sandbox_runner.errors import SandboxError

if TYPE_CHECKING:
    import docker

_CHUNK = 1 << 20


def manager_address(client: docker.DockerClient) -> str:
    """The address the swarm's nodes reach this machine's manager at; SandboxError if the
    engine is no manager of a swarm."""
    swarm = client.info().get("Swarm") or {}
    if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
        raise SandboxError(
            "sandbox engine 'swarm': the local Docker engine is not a swarm manager; "
            "make one with 'docker swarm init' (and 'docker swarm join' on the other machines)"
        )
    address = swarm.get("NodeAddr")
    if not isinstance(address, str) or not address:
        raise SandboxError("sandbox engine 'swarm': the swarm reports no address for this node")
    return address


class PackServer:
    """Serves files over HTTP on `address`, each at a random path while it is offered."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._files: dict[str, Path] = {}
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> Self:
        files = self._files

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = files.get(self.path.lstrip("/"))
                if path is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(path.stat().st_size))
                self.end_headers()
                with path.open("rb") as data, contextlib.suppress(OSError):
                    while chunk := data.read(_CHUNK):
                        self.wfile.write(chunk)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: a request is no news."""

        self._server = ThreadingHTTPServer((self._address, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fks-packs", daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def offer(self, path: Path) -> tuple[str, str]:
        """(token, URL) of `path`, until `withdraw(token)`."""
        assert self._server is not None, "with PackServer(...) first"
        token = secrets.token_urlsafe(24)
        self._files[token] = path
        port = self._server.server_address[1]
        return token, f"http://{self._address}:{port}/{token}"

    def withdraw(self, token: str) -> None:
        self._files.pop(token, None)
