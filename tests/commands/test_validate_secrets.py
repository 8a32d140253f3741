"""`fks validate` checks `sandbox.secrets`, `deny` and `caCerts` against this machine: each
problem is one line naming the entry and the fix, exit 2, no traceback; with every source in
place the config is OK."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks, init_repo, write_config

SET = "FKS_TEST_SECRET_SET"
UNSET = "FKS_TEST_SECRET_NEVER_SET"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (SET, UNSET):
        monkeypatch.delenv(name, raising=False)
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    (path / "token").write_text("file-token-value\n")
    (path / "certs").mkdir()
    (path / "certs" / "ca.crt").write_text(PEM)
    return path


def _config(
    repo: Path,
    sandbox: dict[str, Any],
    *,
    agent: dict[str, Any] | None = None,
    chain: dict[str, Any] | None = None,
) -> None:
    write_config(
        repo,
        {
            "agents": {"a": {"path": "true", **({"sandbox": agent} if agent else {})}},
            "chains": {"c": {"steps": [{"agent": "a"}], **({"sandbox": chain} if chain else {})}},
            "sandbox": sandbox,
        },
    )


def _validate(repo: Path) -> str:
    """The one line validate fails with."""
    done = fks("validate", cwd=repo, env={SET: "a-secret-value"})
    assert done.code == 2, done.output
    assert "Traceback" not in done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_validate_passes_once_every_source_is_in_place(repo: Path) -> None:
    _config(
        repo,
        {
            "secrets": [
                {"host": "api.example.com", "env": SET},
                {"host": "*.internal.example", "file": "token", "header": "X-Token"},
                {"host": "git.example.com", "env": SET, "scheme": "basic", "user": "x"},
            ],
            "deny": ["*.evil.example", "other.internal.example"],
            "caCerts": ["certs/ca.crt", str(repo / "certs" / "ca.crt")],
            "hosts": {"git.internal.example": "10.0.0.5"},
        },
    )
    unset = fks("validate", cwd=repo)
    assert unset.code == 2, unset.output
    assert f"environment variable {SET} is not set" in unset.stderr
    done = fks("validate", cwd=repo, env={SET: "a-secret-value"})
    assert done.code == 0, done.output
    assert "a-secret-value" not in done.output


def test_an_unset_variable_names_the_entry_and_the_fix(repo: Path) -> None:
    _config(repo, {"secrets": [{"host": "api.example.com", "env": UNSET}]})
    assert _validate(repo).endswith(
        "forge/chains.json: sandbox: secret for api.example.com: environment variable "
        f"{UNSET} is not set; export {UNSET} before running fks (or remove the secret)"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read {path} (No such file or directory); create it or fix the path"),
        ("x" * 9000, "{path} is 9,000 bytes, over 2,050; is it the right file?"),
        ('has"quote\n', "the value from file token is empty or has characters a header cannot"),
        ("\n", "the value from file token is empty"),
    ],
    ids=["missing", "oversized", "bad-value", "empty"],
)
def test_a_secret_file_that_cannot_serve_is_one_line(
    repo: Path, content: str | None, expected: str
) -> None:
    path = repo / "token"
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    _config(repo, {"secrets": [{"host": "*.internal.example", "file": "token"}]})
    line = _validate(repo)
    assert "sandbox: secret for *.internal.example: " in line
    assert expected.format(path=path) in line


def test_a_secret_the_container_would_see_is_refused(repo: Path) -> None:
    _config(repo, {"secrets": [{"host": "api.example.com", "env": SET}], "env": [SET]})
    assert _validate(repo).endswith(
        f"sandbox: secret for api.example.com: {SET} is also in 'env', which would put its "
        f"value in the container; remove {SET} from 'env' (the container gets a placeholder, "
        "the proxy adds the value)"
    )


@pytest.mark.parametrize("network", ["open", "bridge", "none", "my-net"])
def test_secrets_need_the_allowlist_network(repo: Path, network: str) -> None:
    _config(repo, {"secrets": [{"host": "api.example.com", "env": SET}], "network": network})
    line = _validate(repo)
    assert f"sandbox: network '{network}' cannot carry secrets" in line
    assert "set network to 'allowlist' or remove the secrets" in line


@pytest.mark.parametrize(
    ("deny", "host"),
    [
        ("*.x.example", "*.x.example"),
        ("*.x.example", "a.x.example"),
        ("api.example.com", "api.example.com"),
        ("api.example.com:443", "api.example.com"),
    ],
)
def test_a_secret_its_deny_covers_is_refused(repo: Path, deny: str, host: str) -> None:
    _config(repo, {"secrets": [{"host": host, "env": SET}], "deny": [deny]})
    assert _validate(repo).endswith(
        f"sandbox: secret for {host}: deny entry '{deny}' refuses its destination, so the "
        "secret could never be used; remove the secret or the deny entry"
    )


def test_a_deny_and_a_secret_from_different_levels_meet_in_the_step(repo: Path) -> None:
    """The chain denies, its step's agent adds the secret: found in the settings the step
    gets, where neither level alone has the problem."""
    _config(
        repo,
        {},
        chain={"deny": ["*.x.example"]},
        agent={"secrets": [{"host": "api.x.example", "env": SET}]},
    )
    assert _validate(repo).endswith(
        "chains.c.steps[0] (a): secret for api.x.example: deny entry '*.x.example' refuses "
        "its destination, so the secret could never be used; remove the secret or the deny entry"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read {path} (No such file or directory); create it or fix the entry"),
        ("not a certificate\n", "{path} holds no '-----BEGIN CERTIFICATE-----'; give a PEM"),
        ("", "{path} holds no '-----BEGIN CERTIFICATE-----'"),
        (2**20 + 1, "{path} is 1,048,577 bytes, over the 1 MiB a CA file may have"),
    ],
    ids=["missing", "not-pem", "empty", "oversized"],
)
def test_a_ca_file_that_cannot_serve_is_one_line(
    repo: Path, content: str | int | None, expected: str
) -> None:
    path = repo / "certs" / "ca.crt"
    if content is None:
        path.unlink()
    elif isinstance(content, int):
        with path.open("r+b") as handle:  # sparse: its size says what it is, unread
            handle.truncate(content)
    else:
        path.write_text(content)
    _config(repo, {"caCerts": ["certs/ca.crt"]})
    line = _validate(repo)
    assert "sandbox.caCerts: certs/ca.crt: " in line
    assert expected.format(path=path) in line


def test_a_ca_file_that_is_a_pipe_is_refused_without_waiting(repo: Path) -> None:
    path = repo / "certs" / "ca.crt"
    path.unlink()
    os.mkfifo(path)
    _config(repo, {"caCerts": ["certs/ca.crt"]})
    assert _validate(repo).endswith(f"{path} is not a regular file; give a PEM file")


def test_a_ca_link_out_of_the_repository_is_refused(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.crt"
    outside.write_text(PEM)
    path = repo / "certs" / "ca.crt"
    path.unlink()
    path.symlink_to(outside)
    _config(repo, {"caCerts": ["certs/ca.crt"]})
    assert "is a symlink that leads out of the repository" in _validate(repo)


def test_a_ca_file_that_is_a_symlink_loop_is_one_line(repo: Path) -> None:
    path = repo / "certs" / "ca.crt"
    path.unlink()
    path.symlink_to(repo / "certs" / "other.crt")
    (repo / "certs" / "other.crt").symlink_to(path)
    _config(repo, {"caCerts": ["certs/ca.crt"]})
    line = _validate(repo)
    assert line.startswith("fks: ") and "sandbox.caCerts: certs/ca.crt: " in line
    assert "symlink loop" in line or "Too many levels of symbolic links" in line


def test_a_secret_file_that_is_a_pipe_is_refused_without_waiting(repo: Path) -> None:
    path = repo / "token"
    path.unlink()
    os.mkfifo(path)
    _config(repo, {"secrets": [{"host": "api.example.com", "file": "token"}]})
    assert _validate(repo).endswith(
        f"sandbox: secret for api.example.com: {path} is not a regular file; "
        "give a file holding the value"
    )


def test_a_secret_file_linking_out_of_the_repository_is_not_read(
    repo: Path, tmp_path: Path
) -> None:
    """A step's merged commit may have replaced the file by a link to another of the user's
    files: its content would go out as the header."""
    outside = tmp_path / "other-credential"
    outside.write_text("not-for-this-destination\n")
    path = repo / "token"
    path.unlink()
    path.symlink_to(outside)
    _config(repo, {"secrets": [{"host": "api.example.com", "file": "token"}]})
    line = _validate(repo)
    assert f"secret for api.example.com: file {path} is a symlink that leads out of the" in line
    assert "not-for-this-destination" not in line
