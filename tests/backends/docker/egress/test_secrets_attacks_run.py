"""A hostile agent against secrets by destination through the real CLI: a secret's value
that Squid cannot read, and a secret's file replaced by the agent between steps."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from fks_testing.helpers import git
from fks_testing.origins import HttpsOrigin, Request
from fks_testing.sandboxed import add_script, configure, nothing_started, sandbox

pytestmark = pytest.mark.docker


def holding(requests: list[Request], token: str) -> list[Request]:
    return [r for r in requests if token in json.dumps(r.headers) or token.encode() in r.body]


def test_a_secret_longer_than_the_proxy_reads_is_refused_without_showing_it(
    repo: Path, tmp_path: Path
) -> None:
    """A long token (a JWT of a few KiB): Squid would refuse its config and print the value
    in its error, which fks shows. The run stops first, with one line that names the
    destination and the limit, never the value, and leaves nothing behind."""
    value = "eyJ" + "A" * 3000 + uuid.uuid4().hex
    configure(repo, {"sandbox": {"secrets": [{"host": "api.test", "env": "LONG_TOKEN"}]}})
    result = sandbox("./scripts/commit.sh:1", env={"LONG_TOKEN": value})
    assert result.code == 2, result.output
    assert value[:64] not in result.output and value[-32:] not in result.output
    assert "secret for api.test" in result.output and "at most 2048" in result.output
    assert "Traceback" not in result.output
    nothing_started(repo)
    stored = [p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert not any(value[:64].encode() in data for data in stored)


PLANT = """#!/bin/sh
ln -sfn "$OUTSIDE" token.txt && git add -f token.txt && git commit -qm "plant" && echo planted
echo FORKHESTRA_COMPLETE
"""
USE = """#!/bin/sh
echo "use=$(curl -sS -o /dev/null -w '%{http_code}' "https://api.test:$API_PORT/v1/models")"
echo FORKHESTRA_COMPLETE
"""


def test_a_later_steps_secret_file_is_never_read_through_an_agents_symlink(
    repo: Path, tmp_path: Path
) -> None:
    """`file` is relative to the repository's top, which the first step's merged commit
    wrote (git replaces an ignored file on merge): a symlink there must not make the host read
    a file the user never named for the second step's secret."""
    inside, outside = f"INSIDE-{uuid.uuid4().hex}", f"OUTSIDE-{uuid.uuid4().hex}"
    (tmp_path / "outside.txt").write_text(outside + "\n")
    (repo / ".gitignore").write_text("token.txt\n")
    (repo / "token.txt").write_text(inside + "\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore the token")
    add_script(repo, "plant.sh", PLANT)
    add_script(repo, "use.sh", USE)
    with HttpsOrigin(("api.test",), value=f"Bearer {inside}") as api:
        cas = tmp_path / "ca.pem"
        cas.write_bytes(api.ca_pem)
        sandbox_settings = {
            "secrets": [{"host": f"api.test:{api.port}", "file": "token.txt"}],
            "hosts": {"api.test": "host-gateway"},
            "caCerts": [str(cas)],
            "env": ["OUTSIDE", "API_PORT"],
        }
        configure(repo, {"sandbox": sandbox_settings})
        env = {"OUTSIDE": str(tmp_path / "outside.txt"), "API_PORT": str(api.port)}
        result = sandbox("./scripts/plant.sh:1 -> ./scripts/use.sh:1", env=env)
        seen = api.requests
    assert "planted" in result.output, result.output
    assert holding(seen, outside) == [], result.output
