"""The local HTTPS origins the secrets tests put behind the proxy, driven from the host with
curl, a raw TLS socket and git, each trusting the origin's own CA and nothing else."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.origins import BODY_LIMIT, GitHttpsServer, HttpsOrigin

TOKEN = "s3cret-for-the-origin"
BEARER = f"Bearer {TOKEN}"


def _env(home: Path) -> dict[str, str]:
    """No CA bundle, proxy or git config of this machine's: only what each call names."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Test User",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test User",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }


def curl(
    origin: HttpsOrigin, path: str, *args: str, name: str = "origin.test", trust: bool = True
) -> tuple[int, str]:
    """The status and body of one request to `origin` as `name`, resolved to loopback."""
    argv = ["curl", "-sS", "--noproxy", "*", "--resolve", f"{name}:{origin.port}:127.0.0.1"]
    argv += ["--cacert", str(origin.ca_path)] if trust else []
    argv += ["-o", "-", "-w", "\n%{http_code}", *args, origin.url(path, name)]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(origin.workdir))
    body, _, code = done.stdout.rpartition("\n")
    return (int(code) if done.returncode == 0 else -done.returncode), body or done.stderr


@pytest.fixture
def origin() -> Iterator[HttpsOrigin]:
    with HttpsOrigin(("origin.test", "*.wild.test"), value=BEARER) as server:
        yield server


def test_origin_answers_only_the_configured_header(origin: HttpsOrigin) -> None:
    assert curl(origin, "/v1/models", "-H", f"Authorization: {BEARER}") == (200, "ok\n")
    assert curl(origin, "/v1/models")[0] == 401
    assert curl(origin, "/", "-H", "Authorization: Bearer wrong")[0] == 401
    # the right value next to another one (an agent's header kept beside the real one)
    two = ["-H", f"Authorization: {BEARER}", "-H", "Authorization: Bearer agent"]
    assert curl(origin, "/", *two)[0] == 401
    assert [r.header("Authorization") for r in origin.requests] == [
        [BEARER],
        [],
        ["Bearer wrong"],
        [BEARER, "Bearer agent"],
    ]


def test_origin_is_trusted_through_its_own_ca_for_its_names_only(origin: HttpsOrigin) -> None:
    assert origin.ca_path.read_bytes() == origin.ca_pem
    assert b"BEGIN CERTIFICATE" in origin.ca_pem
    header = ["-H", f"Authorization: {BEARER}"]
    assert curl(origin, "/", *header, name="a.wild.test") == (200, "ok\n")
    assert curl(origin, "/", *header, name="deeper.a.wild.test")[0] < 0
    assert curl(origin, "/", *header, name="other.test")[0] < 0
    assert curl(origin, "/", *header, trust=False)[0] < 0
    # only the two that verified came through as requests
    assert [r.host for r in origin.requests] == [f"a.wild.test:{origin.port}"]


def test_echo_and_trace_reflect_the_request_headers(origin: HttpsOrigin) -> None:
    code, body = curl(origin, "/echo?x=1", "-H", f"Authorization: {BEARER}", "-H", "X-Probe: 7")
    assert code == 200
    lines = body.splitlines()
    assert lines[0] == "GET /echo?x=1 HTTP/1.1"
    assert {f"Host: origin.test:{origin.port}", f"Authorization: {BEARER}", "X-Probe: 7"} <= {
        *lines
    }
    code, body = curl(origin, "/anything", "-X", "TRACE", "-H", f"Authorization: {BEARER}")
    assert code == 200 and f"Authorization: {BEARER}" in body.splitlines()
    assert body.splitlines()[0] == "TRACE /anything HTTP/1.1"


def test_redirect_sends_the_client_where_it_is_told(origin: HttpsOrigin) -> None:
    target = f"https://other.test:{origin.port}/landing"
    code, _ = curl(origin, f"/redirect?to={target}", "-H", f"Authorization: {BEARER}")
    assert code == 302
    argv = ["-o", "/dev/null", "-w", "%{redirect_url}", "--resolve", "x:1:127.0.0.1"]
    argv += ["--cacert", str(origin.ca_path), "--resolve", f"origin.test:{origin.port}:127.0.0.1"]
    where = subprocess.run(
        ["curl", "-sS", "--noproxy", "*", *argv, origin.url(f"/redirect?to={target}")],
        capture_output=True,
        text=True,
        env=_env(origin.workdir),
    )
    assert where.stdout == target
    # a Location header cannot be split into two by what comes in the query
    assert curl(origin, "/redirect?to=https://x/%0d%0aSet-Cookie:%20a=b")[0] == 400


def test_every_request_is_recorded_whatever_its_method(origin: HttpsOrigin) -> None:
    assert curl(origin, "/p?q=1", "-X", "PROPFIND", "-H", "X-A: 1", "-H", "X-A: 2")[0] == 401
    assert curl(origin, "/up", "--data-binary", "payload", "-H", "Transfer-Encoding: chunked")[0]
    (propfind, post) = origin.requests
    assert (propfind.method, propfind.path, propfind.host) == (
        "PROPFIND",
        "/p?q=1",
        f"origin.test:{origin.port}",
    )
    assert propfind.header("x-a") == ["1", "2"]
    assert ("X-A", "1") in propfind.headers
    assert (post.method, post.path, post.body) == ("POST", "/up", b"payload")
    assert post.header("Transfer-Encoding") == ["chunked"]


def _raw(origin: HttpsOrigin, head: str, body: bytes = b"") -> bytes:
    """What the origin answers to `head` (and `body`) sent as they are over TLS, until it closes."""
    context = ssl.create_default_context(cafile=str(origin.ca_path))
    with (
        socket.create_connection(("127.0.0.1", origin.port), timeout=60) as plain,
        context.wrap_socket(plain, server_hostname="origin.test") as tls,
    ):
        tls.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer


def test_bodies_over_the_limit_are_refused_before_they_are_read(origin: HttpsOrigin) -> None:
    # A length the client never sends: an origin that read it would wait, not answer.
    head = f"POST /big HTTP/1.1\nHost: origin.test\nContent-Length: {10**12}\n"
    assert _raw(origin, head).startswith(b"HTTP/1.1 413 ")
    chunked = "POST /big HTTP/1.1\nHost: origin.test\nTransfer-Encoding: chunked\n"
    assert _raw(origin, chunked, f"{BODY_LIMIT + 1:x}\r\n".encode()).startswith(b"HTTP/1.1 413 ")
    both = "POST /x HTTP/1.1\nHost: origin.test\nContent-Length: 3\nTransfer-Encoding: chunked\n"
    assert _raw(origin, both, b"0\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    bad_size = "POST /x HTTP/1.1\nHost: origin.test\nTransfer-Encoding: chunked\n"
    assert _raw(origin, bad_size, b"-5\r\n").startswith(b"HTTP/1.1 400 ")
    assert [(r.path, r.body) for r in origin.requests] == [("/big", b"")] * 2 + [("/x", b"")] * 2


# --- the git server -------------------------------------------------------------------------


@pytest.fixture
def git_server() -> Iterator[GitHttpsServer]:
    with GitHttpsServer(("git.test",), user="x-access-token", token=TOKEN) as server:
        yield server


def git(
    server: GitHttpsServer, *args: str, cwd: Path | None = None, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """git on the host as a client of `server`, trusting its CA; with `token`, sent as
    `Authorization: Basic base64(user:token)` through http.extraHeader."""
    argv = ["git", "-c", f"http.sslCAInfo={server.ca_path}"]
    argv += ["-c", f"http.curloptResolve=git.test:{server.port}:127.0.0.1"]
    if token is not None:
        basic = base64.b64encode(f"{server.user}:{token}".encode()).decode()
        argv += ["-c", f"http.extraHeader=Authorization: Basic {basic}"]
    return subprocess.run(
        [*argv, *args], cwd=cwd, capture_output=True, text=True, env=_env(server.workdir)
    )


def test_git_clone_and_push_work_with_the_token_only(
    git_server: GitHttpsServer, tmp_path: Path
) -> None:
    seeded = git_server.branch("main")
    assert seeded is not None
    assert (
        git_server.authorization
        == "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    )
    refused = git(git_server, "clone", git_server.clone_url, str(tmp_path / "no"), token="bad")
    assert refused.returncode != 0 and not (tmp_path / "no").exists()
    assert git(git_server, "clone", git_server.clone_url, str(tmp_path / "anon")).returncode
    work = tmp_path / "work"
    done = git(git_server, "clone", git_server.clone_url, str(work), token=TOKEN)
    assert done.returncode == 0, done.stderr
    assert (work / "README").is_file()
    (work / "change").write_bytes(os.urandom(2 << 20))  # over git's post buffer: chunked
    for argv in (["add", "change"], ["commit", "-q", "-m", "Change"]):
        subprocess.run(["git", *argv], cwd=work, check=True, env=_env(tmp_path))
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert git(git_server, "push", "origin", "HEAD:refs/heads/anon", cwd=work).returncode != 0
    assert git(git_server, "push", "origin", "HEAD:refs/heads/bad", cwd=work, token="x").returncode
    pushed = git(git_server, "push", "origin", "HEAD:refs/heads/agent", cwd=work, token=TOKEN)
    assert pushed.returncode == 0, pushed.stderr
    assert (git_server.branch("agent"), git_server.branch("anon")) == (head, None)
    assert git_server.branch("bad") is None and git_server.branch("main") == seeded
    assert any(r.header("Transfer-Encoding") == ["chunked"] for r in git_server.requests)


def test_git_fetch_with_a_gzipped_negotiation(git_server: GitHttpsServer, tmp_path: Path) -> None:
    work, other = tmp_path / "work", tmp_path / "other"
    for clone in (work, other):
        done = git(git_server, "clone", git_server.clone_url, str(clone), token=TOKEN)
        assert done.returncode == 0, done.stderr
    # A commit on the server that `work` lacks, and many local commits `work` offers as
    # "have"s: git gzips negotiation requests once they pass a kilobyte.
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "Side"],
        cwd=other,
        check=True,
        env=_env(tmp_path),
    )
    assert git(git_server, "push", "origin", "HEAD:side", cwd=other, token=TOKEN).returncode == 0
    now = int(time.time())  # newer than the seed: offered before the commit both have
    script = "".join(
        f"commit refs/heads/main\ncommitter T <t@e> {now + i} +0000\ndata 2\n{i % 10}\n"
        + ("from refs/heads/main^0\n" if i == 0 else "")
        for i in range(300)
    )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=work, input=script, text=True, check=True)
    before = len(git_server.requests)
    fetched = git(git_server, "fetch", "origin", cwd=work, token=TOKEN)
    assert fetched.returncode == 0, fetched.stderr
    assert (
        git_server.branch("side")
        == subprocess.run(
            ["git", "rev-parse", "origin/side"],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    gzipped = [r for r in git_server.requests[before:] if r.header("Content-Encoding") == ["gzip"]]
    assert gzipped, [r.headers for r in git_server.requests[before:]]
