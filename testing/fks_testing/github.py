"""A fake of GitHub's REST API for the pull-request tests, offline: pulls (create, list by
`head=OWNER:BRANCH` and `state`, update), issue comments and commit statuses, answered as GitHub
answers them (401, 403 with a secondary rate limit and `Retry-After`, a primary rate limit with
`x-ratelimit-remaining: 0`, 422 "A pull request already exists" / "No commits between", 502).

State lives in memory; each repository's branches are those of a real bare repository (the
remote `git push` writes to, by path), read with git. Every request is recorded, and a test can
script the next answers to a method and path (`fail`).
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from fks_testing.origins import Request

_PREFIX = "/api/v3"  # GitHub Enterprise's base path; api.github.com has none: both are served
_BODY_LIMIT = 8 << 20


@dataclass
class Scripted:
    """An answer given instead of the real one to the next `times` requests matching."""

    method: str
    path: re.Pattern[str]
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


@dataclass
class FakeRepo:
    """One repository: its bare git repository and what the API holds of it."""

    bare: Path
    default_branch: str = "main"
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def sha(self, branch: str) -> str | None:
        done = subprocess.run(
            [
                "git",
                "--git-dir",
                str(self.bare),
                "rev-parse",
                "--verify",
                "-q",
                f"refs/heads/{branch}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or None

    def ahead(self, base: str, head: str) -> int:
        done = subprocess.run(
            ["git", "--git-dir", str(self.bare), "rev-list", "--count", f"{base}..{head}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout.strip())


class FakeGitHub:
    """GitHub's REST API for `repos` (`owner/name` → bare repository), on 127.0.0.1.

    `tokens` maps each token it knows to whether it may push; any other is a 401."""

    def __init__(self, repos: Mapping[str, Path], tokens: Mapping[str, bool]) -> None:
        self.repos = {name: FakeRepo(path) for name, path in repos.items()}
        self.tokens = dict(tokens)
        self.requests: list[Request] = []
        self._scripted: list[Scripted] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` `method` requests whose path matches `path` (a regex) so."""
        with self._lock:
            self._scripted.append(
                Scripted(
                    method,
                    re.compile(path),
                    status,
                    body or {"message": "Server Error"},
                    headers or {},
                    times,
                )
            )

    def secondary_rate_limit(self, method: str, path: str, retry_after: int = 1) -> None:
        self.fail(
            method,
            path,
            403,
            {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."},
            {"Retry-After": str(retry_after)},
        )

    def primary_rate_limit(self, method: str, path: str, reset_in: int = 1) -> None:
        reset = str(int(time.time()) + reset_in)
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
        self.fail(method, path, 403, {"message": "API rate limit exceeded for user."}, headers)

    def pulls(self, repo: str) -> list[dict[str, Any]]:
        return list(self.repos[repo].pulls.values())

    def __enter__(self) -> Self:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
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

    # --- answering ---------------------------------------------------------------------------

    def answer(self, request: Request) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.requests.append(request)
            scripted = self._take_scripted(request)
            if scripted is not None:
                return scripted.status, scripted.headers, scripted.body
            return self._answer(request)

    def _take_scripted(self, request: Request) -> Scripted | None:
        path = request.path.split("?", 1)[0]
        for item in self._scripted:
            if item.method == request.method and item.path.search(path) and item.times > 0:
                item.times -= 1
                return item
        return None

    def _answer(self, request: Request) -> tuple[int, dict[str, str], Any]:
        token = _token(request.header("Authorization"))
        if token is None or token not in self.tokens:
            return 401, {}, {"message": "Bad credentials"}
        url = urllib.parse.urlsplit(request.path)
        path = url.path.removeprefix(_PREFIX)
        match = re.fullmatch(r"/repos/([^/]+/[^/]+)(/.*)?", path)
        if match is None or match.group(1) not in self.repos:
            return 404, {}, {"message": "Not Found"}
        repo, rest = self.repos[match.group(1)], (match.group(2) or "").rstrip("/")
        query = dict(urllib.parse.parse_qsl(url.query))
        body = json.loads(request.body) if request.body else {}
        return _route(self, match.group(1), repo, request.method, rest, query, body, token)


def _token(values: list[str]) -> str | None:
    if not values:
        return None
    scheme, _, value = values[0].partition(" ")
    return value if scheme.lower() in ("token", "bearer") else None


def _route(
    fake: FakeGitHub,
    name: str,
    repo: FakeRepo,
    method: str,
    rest: str,
    query: dict[str, str],
    body: dict[str, Any],
    token: str,
) -> tuple[int, dict[str, str], Any]:
    owner = name.split("/")[0]
    if method == "GET" and rest == "":
        push = fake.tokens[token]
        perms = {"admin": False, "push": push, "pull": True}
        return (
            200,
            {},
            {"full_name": name, "default_branch": repo.default_branch, "permissions": perms},
        )
    if method == "GET" and rest.startswith("/branches/"):
        branch = urllib.parse.unquote(rest.removeprefix("/branches/"))
        sha = repo.sha(branch)
        if sha is None:
            return 404, {}, {"message": "Branch not found"}
        return 200, {}, {"name": branch, "commit": {"sha": sha}}
    return _route_writes(repo, owner, name, method, rest, query, body)


def _route_writes(
    repo: FakeRepo,
    owner: str,
    name: str,
    method: str,
    rest: str,
    query: dict[str, str],
    body: dict[str, Any],
) -> tuple[int, dict[str, str], Any]:
    if method == "GET" and rest == "/pulls":
        return 200, {}, _listed(repo, query)
    if method == "POST" and rest == "/pulls":
        return _create_pull(repo, owner, name, body)
    found = re.fullmatch(r"/pulls/(\d+)", rest)
    if method == "PATCH" and found and int(found.group(1)) in repo.pulls:
        pull = repo.pulls[int(found.group(1))]
        pull.update({k: v for k, v in body.items() if k in ("title", "body", "state", "base")})
        if isinstance(body.get("base"), str):
            pull["base"] = {"ref": body["base"]}
        pull["head"]["sha"] = repo.sha(pull["head"]["ref"])
        return 200, {}, pull
    found = re.fullmatch(r"/issues/(\d+)/comments", rest)
    if method == "POST" and found and int(found.group(1)) in repo.pulls:
        comment = {"id": len(repo.comments) + 1, "body": body.get("body", "")}
        repo.comments.setdefault(int(found.group(1)), []).append(comment)
        return 201, {}, comment
    found = re.fullmatch(r"/statuses/([0-9a-f]{40})", rest)
    if method == "POST" and found:
        repo.statuses.setdefault(found.group(1), []).append(body)
        return 201, {}, body
    return 404, {}, {"message": "Not Found"}


def _listed(repo: FakeRepo, query: dict[str, str]) -> list[dict[str, Any]]:
    state = query.get("state", "open")
    pulls = [p for p in repo.pulls.values() if state == "all" or p["state"] == state]
    head = query.get("head", "")
    if ":" in head:  # GitHub ignores a head without its owner (and lists every pull)
        pulls = [p for p in pulls if p["head"]["label"] == head]
    return pulls


def _invalid(message: str) -> tuple[int, dict[str, str], Any]:
    return (
        422,
        {},
        {
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom", "message": message}],
        },
    )


def _create_pull(
    repo: FakeRepo, owner: str, name: str, body: dict[str, Any]
) -> tuple[int, dict[str, str], Any]:
    head, base = str(body.get("head", "")), str(body.get("base", ""))
    branch = head.split(":", 1)[-1]
    if repo.sha(branch) is None or repo.sha(base) is None:
        return (
            422,
            {},
            {"message": "Validation Failed", "errors": [{"field": "head", "code": "invalid"}]},
        )
    label = f"{owner}:{branch}"
    if any(p["head"]["label"] == label and p["state"] == "open" for p in repo.pulls.values()):
        return _invalid(f"A pull request already exists for {label}.")
    if repo.ahead(base, branch) == 0:
        return _invalid(f"No commits between {base} and {branch}")
    number = len(repo.pulls) + 1
    pull = {
        "number": number,
        "html_url": f"https://github.com/{name}/pull/{number}",
        "state": "open",
        "draft": bool(body.get("draft", False)),
        "title": body.get("title", ""),
        "body": body.get("body", ""),
        "head": {"ref": branch, "label": label, "sha": repo.sha(branch)},
        "base": {"ref": base},
    }
    repo.pulls[number] = pull
    return 201, {}, pull


class _Handler(http.server.BaseHTTPRequestHandler):
    api: FakeGitHub

    def _dispatch(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), _BODY_LIMIT)
        request = Request(
            self.command, self.path, tuple(self.headers.items()), self.rfile.read(length)
        )
        status, headers, body = self.api.answer(request)
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _dispatch

    def log_message(self, format: str, *args: object) -> None:
        pass


REPO = "acme/widgets"
REMOTE_URL = f"https://github.com/{REPO}.git"
TOKEN = "ghp_fkstesttoken0123456789abcdef"


def github_remote(project: Path, bare: Path, url: str = REMOTE_URL) -> Path:
    """Give `project` (a git repository with a `main`) the remote `origin` at `url`, which git
    rewrites (`url.*.insteadOf`) to the bare repository `bare`; `main` is pushed there."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    for args in (
        ("remote", "add", "origin", url),
        ("config", f"url.{bare}.insteadOf", url),
        ("push", "-q", "origin", "main"),
    ):
        subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True)
    return bare


def token_env(api: str, token: str = TOKEN) -> dict[str, str]:
    """The environment of an `fks` that opens pull requests through the fake at `api`."""
    return {"GITHUB_TOKEN": token, "GITHUB_API_URL": api, "GH_TOKEN": ""}
