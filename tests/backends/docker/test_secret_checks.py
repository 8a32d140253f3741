"""A sandboxed run's secrets as the user sees them: a run or a forge run whose secret cannot be
read is refused before anything starts; --dry-run and -v show each step's secrets by
destination, header and source (an agent's entry replacing the chain's for its destination),
never a value, and a dry run marks a variable that is not set instead of failing."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks, git
from fks_testing.sandboxed import configure, nothing_started, sandbox

pytestmark = pytest.mark.docker

SET = "FKS_TEST_SECRET_SET"
UNSET = "FKS_TEST_SECRET_NEVER_SET"
VALUE = "sk-distinctive-3f9a7c1e5b"
FILE_VALUE = "file-distinctive-8d2e4a6c"
AGENT = "./scripts/commit.sh:1"


@pytest.fixture(autouse=True)
def _no_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (SET, UNSET):
        monkeypatch.delenv(name, raising=False)


def _never_shown(output: str) -> None:
    for value in (VALUE, FILE_VALUE, base64.b64encode(f"x-access-token:{VALUE}".encode()).decode()):
        assert value not in output


def _secrets(token: Path) -> dict[str, Any]:
    return {
        "allow": ["pypi.org", "*.pythonhosted.org"],
        "deny": ["*.evil.example"],
        "hosts": {"git.internal.example": "10.0.0.5"},
        "secrets": [
            {"host": "api.example.com", "env": SET},
            {"host": "github.com", "env": SET, "scheme": "basic", "user": "x-access-token"},
            {"host": "*.internal.example", "file": str(token), "header": "X-Token"},
        ],
    }


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(FILE_VALUE + "\n")
    return path


def test_a_run_with_an_unset_secret_variable_starts_nothing(repo: Path) -> None:
    configure(repo, {"sandbox": {"secrets": [{"host": "api.example.com", "env": UNSET}]}})
    res = sandbox(AGENT)
    assert res.code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"fks: sandbox: secret for api.example.com: environment variable {UNSET} is not set; "
        f"export {UNSET} before running fks (or remove the secret)"
    ]
    nothing_started(repo)


def test_a_forge_run_with_an_unset_secret_variable_starts_nothing(repo: Path) -> None:
    configure(repo, {"sandbox": {"secrets": [{"host": "api.example.com", "env": UNSET}]}})
    created = fks("forge", "create", "something", "--description", "Make something", cwd=repo)
    assert created.code == 0, created.output
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a task")
    res = fks("forge", "run", "--sandbox", cwd=repo)
    assert res.code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"fks: sandbox: secret for api.example.com: environment variable {UNSET} is not set; "
        f"export {UNSET} before running fks (or remove the secret)"
    ]
    assert not (repo / ".forge" / "work").exists()
    nothing_started(repo)


def test_dry_run_shows_secrets_by_destination_and_source_never_the_value(
    repo: Path, token: Path
) -> None:
    configure(repo, {"sandbox": _secrets(token)})
    res = sandbox(AGENT, "--dry-run", env={SET: VALUE})
    assert res.code == 0, res.output
    _never_shown(res.output)
    network = [line.strip() for line in res.stdout.splitlines() if "network:" in line]
    assert network == [
        "network: allowlist: pypi.org, *.pythonhosted.org; secrets added by the proxy: "
        f"api.example.com (Authorization: Bearer, from env {SET}), "
        f"github.com (Authorization: Basic, user x-access-token, from env {SET}), "
        f"*.internal.example (X-Token: Bearer, from file {token}); "
        "names looked up as: git.internal.example at 10.0.0.5; "
        "refused even so: *.evil.example; everything else refused"
    ]
    as_json = sandbox(AGENT, "--dry-run", "--json", env={SET: VALUE})
    assert as_json.code == 0, as_json.output
    _never_shown(as_json.output)
    assert "api.example.com (Authorization" in json.loads(as_json.stdout)["steps"][0]["network"]


def test_dry_run_shows_a_raw_secrets_header_alone(repo: Path) -> None:
    configure(
        repo,
        {
            "sandbox": {
                "secrets": [{"host": "a.example", "env": SET, "header": "X-Key", "scheme": "raw"}]
            }
        },
    )
    res = sandbox(AGENT, "--dry-run", env={SET: VALUE})
    assert res.code == 0, res.output
    assert f"a.example (X-Key, from env {SET})" in res.stdout
    _never_shown(res.output)


def test_dry_run_marks_a_secret_that_is_not_set_and_shows_the_plan(repo: Path) -> None:
    configure(repo, {"sandbox": {"secrets": [{"host": "api.example.com", "env": UNSET}]}})
    res = sandbox(AGENT, "--dry-run")
    assert res.code == 0, res.output
    assert f"api.example.com (Authorization: Bearer, from env {UNSET}: not set)" in res.stdout
    assert "Step 1: ./scripts/commit.sh (max 1 iteration)" in res.stdout
    nothing_started(repo)


def test_an_agents_secret_replaces_the_chains_for_its_destination(repo: Path) -> None:
    configure(
        repo,
        {
            "sandbox": {"secrets": [{"host": "top.example", "env": "TOP_TOKEN"}]},
            "agents": {
                "worker": {
                    "path": "./scripts/commit.sh",
                    "sandbox": {
                        "secrets": [{"host": "api.example.com", "env": "AGENT_TOKEN"}],
                    },
                }
            },
            "chains": {
                "c": {
                    "steps": [{"agent": "worker"}],
                    "sandbox": {
                        "secrets": [
                            {"host": "api.example.com", "env": "CHAIN_TOKEN", "header": "X-Key"},
                            {"host": "chain.example", "env": "CHAIN_OTHER"},
                        ]
                    },
                }
            },
        },
    )
    res = fks("run", "--chain", "c", "--sandbox", "--dry-run", cwd=repo)
    assert res.code == 0, res.output
    network = [line.strip() for line in res.stdout.splitlines() if "network:" in line]
    assert network == [
        "network: allowlist: the secrets' destinations; secrets added by the proxy: "
        "top.example (Authorization: Bearer, from env TOP_TOKEN: not set), "
        "api.example.com (Authorization: Bearer, from env AGENT_TOKEN: not set), "
        "chain.example (Authorization: Bearer, from env CHAIN_OTHER: not set); "
        "everything else refused"
    ]


def test_verbose_run_shows_the_steps_secrets_never_the_value(repo: Path) -> None:
    configure(repo, {"sandbox": {"secrets": [{"host": "api.example.com", "env": SET}]}})
    res = sandbox(AGENT, "-v", env={SET: VALUE, "MARK_AT": "1"})
    assert res.code == 0, res.output
    assert (
        f"secrets added by the proxy: api.example.com (Authorization: Bearer, from env {SET})"
        in (res.output)
    )
    _never_shown(res.output)
