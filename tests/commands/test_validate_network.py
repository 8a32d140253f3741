"""A typo in `sandbox.network` is a mistake, not a Docker network: `fks validate` and a run
refuse it (exit 2, one line with "did you mean"), and a run starts nothing; a Docker network of
the user's is written `docker:NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import calls, fks, init_repo, write_config


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


def _config(repo: Path, sandbox: dict[str, Any], agent: dict[str, Any] | None = None) -> None:
    write_config(
        repo,
        {
            "agents": {"fk:builder": {"path": "fake", **({"sandbox": agent} if agent else {})}},
            "chains": {"c": {"steps": [{"agent": "fk:builder"}]}},
            "sandbox": sandbox,
        },
    )


def _one_line(repo: Path, *args: str) -> str:
    done = fks(*args, cwd=repo)
    assert done.code == 2, done.output
    assert "Traceback" not in done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("typo", ["allowlst", "alowlist", "Allowlist", "ALLOWLIST", "allow"])
def test_validate_refuses_a_network_typo_with_did_you_mean(repo: Path, typo: str) -> None:
    _config(repo, {"network": typo})
    assert _one_line(repo, "validate") == (
        f"fks: forge/chains.json: sandbox.network: '{typo}' is not a network setting "
        f"(did you mean 'allowlist'?); a Docker network of your own is written 'docker:{typo}'"
    )


def test_a_typo_in_an_agents_network_is_named_where_it_is(repo: Path) -> None:
    _config(repo, {}, agent={"network": "opne"})
    line = _one_line(repo, "validate")
    assert "agents.fk:builder.sandbox.network: 'opne' is not a network setting" in line
    assert "(did you mean 'open'?)" in line


@pytest.mark.parametrize("args", [("--chain", "c"), ("--chain", "c", "--dry-run")])
def test_a_run_with_a_network_typo_starts_nothing(repo: Path, args: tuple[str, ...]) -> None:
    _config(repo, {"network": "allowlst"})
    line = _one_line(repo, "run", *args, "--sandbox")
    assert "(did you mean 'allowlist'?)" in line
    assert "docker network create" not in line
    assert calls(repo.parent) == []
    assert not (repo / ".forge" / "runs").exists()


def test_docker_prefix_names_no_setting_of_fks(repo: Path) -> None:
    _config(repo, {"network": "docker:allowlist"})
    assert _one_line(repo, "validate").endswith(
        "sandbox.network: 'docker:allowlist': 'allowlist' is a setting of fks's, not a Docker "
        "network; write 'allowlist'"
    )
    _config(repo, {"network": "docker:a b"})
    assert "is none of allowlist, open, none, host, nor a Docker network's name" in _one_line(
        repo, "validate"
    )


def test_settings_and_networks_of_the_users_pass_validate(repo: Path) -> None:
    for network in ("allowlist", "open", "bridge", "none", "host"):
        _config(repo, {"network": network})
        done = fks("validate", cwd=repo)
        assert done.code == 0, done.output
