"""Secrets by destination through the real CLI and engine, offline: `fks run --sandbox` with
`sandbox.secrets`, a local HTTPS origin and a git server over HTTPS, each with its own CA
(`sandbox.caCerts`) and a name only `sandbox.hosts` knows. The agent gets 200 with its plain
curl, clones and pushes with plain git, and no token is ever in the container or the run's
records and logs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from fks_testing.helpers import fks, git
from fks_testing.origins import GitHttpsServer, HttpsOrigin
from fks_testing.sandboxed import (
    RUNTIMES,
    add_script,
    configure,
    record,
    runtime_args,
    sandbox,
)

pytestmark = pytest.mark.docker

AGENT = """#!/bin/sh
set -u
code=$(curl -sS -o /dev/null -w '%{http_code}' "https://api.test:$API_PORT/v1/things")
echo "curl=$code"
git clone -q "https://git.test:$GIT_PORT/repo.git" /tmp/remote && cd /tmp/remote &&
  echo "from the agent" > agent.txt && git add agent.txt && git commit -qm "agent work" &&
  git push -q origin HEAD:refs/heads/agent-branch && echo "push=ok"
echo "helpers=$(git config --get-all credential.helper | wc -l)"
ls -a "$HOME"/.git-credentials 2>/dev/null; echo "placeholder=$API_TOKEN"
cd "$OLDPWD" && echo "$code" > curl-result.txt && git add curl-result.txt &&
  git commit -qm "curl result" && echo FORKHESTRA_COMPLETE
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_curl_and_git_over_https_with_secrets_the_container_never_holds(
    repo: Path, tmp_path: Path, runtime: str
) -> None:
    token, git_token = f"sk-REAL-{uuid.uuid4().hex}", f"ghp_REAL{uuid.uuid4().hex}"
    with (
        HttpsOrigin(("api.test",), value=f"Bearer {token}") as api,
        GitHttpsServer(("git.test",), token=git_token) as server,
    ):
        api_port, git_port = api.port, server.port
        cas = tmp_path / "cas.pem"
        cas.write_bytes(api.ca_pem + server.ca_pem)
        add_script(repo, "agent.sh", AGENT)
        secrets = [
            {"host": f"api.test:{api.port}", "env": "API_TOKEN"},
            {
                "host": f"git.test:{server.port}",
                "env": "GIT_TOKEN",
                "scheme": "basic",
                "user": "x-access-token",
            },
        ]
        hosts = {"api.test": "host-gateway", "git.test": "host-gateway"}
        configure(
            repo,
            {
                "sandbox": {
                    "secrets": secrets,
                    "hosts": hosts,
                    "caCerts": [str(cas)],
                    "env": ["API_PORT", "GIT_PORT"],
                }
            },
        )
        env = {
            "API_TOKEN": token,
            "GIT_TOKEN": git_token,
            "API_PORT": str(api.port),
            "GIT_PORT": str(server.port),
        }
        result = sandbox("./scripts/agent.sh:1", "-v", *runtime_args(runtime), env=env)
        assert result.code == 0, result.output
        assert "curl=200" in result.stdout and "push=ok" in result.stdout, result.output
        assert "helpers=0" in result.stdout and "placeholder=fks-placeholder" in result.stdout
        assert ".git-credentials" not in result.stdout
        # The origins saw the real tokens; the pushed branch is there.
        assert api.requests[-1].header("Authorization") == [f"Bearer {token}"]
        assert server.branch("agent-branch") is not None
    assert git(repo, "show", "main:curl-result.txt").strip() == "200"
    # -v named the secrets by destination and source; nothing anywhere holds a token.
    assert f"api.test:{api_port}" in result.output and "API_TOKEN" in result.output
    run = record(repo)
    shown = fks("show", run["id"])
    # The egress audit lists the iteration's requests and where a secret was added.
    audit = json.loads(fks("show", run["id"], "--network", "--json").stdout)
    rows = [r for s in audit["steps"] for it in s["iterations"] for r in it["network"]["requests"]]
    secrets_added = {r["secret"] for r in rows if r["secret"]}
    assert {f"api.test:{api_port}", f"git.test:{git_port}"} <= secrets_added, rows
    # The tunnels to the secrets' destinations are listed as such, not as unreadable requests.
    tunnels = {(r["host"], r["port"]): r for r in rows if r["method"] == "CONNECT"}
    assert set(tunnels) == {("api.test", api_port), ("git.test", git_port)}, rows
    assert all(
        (r["result"], r["status"], r["secret"]) == ("SECRET_TUNNEL", 200, None)
        for r in tunnels.values()
    ), rows
    table = fks("show", run["id"], "--network").stdout
    assert "SECRET_TUNNEL" in table and "NONE_NONE" not in table, table
    stored = [p.read_bytes() for p in (repo / ".forge").rglob("*") if p.is_file()]
    for text in (result.output, shown.output, *(s.decode(errors="replace") for s in stored)):
        assert token not in text and git_token not in text
