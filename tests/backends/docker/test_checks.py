"""Settings and environment checked before a sandboxed run starts: a model API on this
machine's loopback, which a container cannot reach, is refused with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_runner.testing.helpers import fks, git, init_repo, write_config

API_KEY = "sk-ant-api03-checks-" + "x" * 20


def _claude_repo(path: Path, sandbox: dict[str, object]) -> Path:
    repo = init_repo(path, {"README.md": "hello\n"})
    write_config(repo, {"agents": {"w": {"systemPromptText": "hi"}}, "sandbox": sandbox})
    git(repo, "add", "forge")
    git(repo, "commit", "-qm", "fks config")
    return repo


@pytest.mark.parametrize(
    ("url", "network", "suggested"),
    [
        ("http://127.0.0.1:8765", None, "http://host.docker.internal:8765"),
        ("http://localhost:8765", "open", "http://host.docker.internal:8765"),
        ("https://LOCALHOST.", "none", "https://host.docker.internal"),
        ("http://[::1]:8765", None, "http://host.docker.internal:8765"),
        ("http://127.1:8765", None, "http://host.docker.internal:8765"),
        ("http://0.0.0.0:8765", "open", "http://host.docker.internal:8765"),
        ("http://api.localhost:8765", None, "http://host.docker.internal:8765"),
        ("http://[::ffff:127.0.0.1]:8765", "some-network", "http://host.docker.internal:8765"),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_loopback_api_url_is_refused_before_anything_starts(
    tmp_path: Path, url: str, network: str | None, suggested: str, dry_run: bool
) -> None:
    """The container (or the egress proxy) would talk to itself: every iteration would wait
    minutes for an API that is not there."""
    repo = _claude_repo(tmp_path / "repo", {"network": network} if network else {})
    done = fks(
        "run",
        "w:2",
        "--prompt",
        "Go.",
        "--sandbox",
        *(["--dry-run"] if dry_run else []),
        cwd=repo,
        env={"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": url},
        timeout=60,
    )
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: ANTHROPIC_BASE_URL {url} is this machine's loopback, which in the sandbox is the "
        f"container itself; use {suggested} and have the API listen on an address containers "
        "reach (e.g. 0.0.0.0)\n"
    )
    assert done.stdout == ""
    assert not (repo / ".forge" / "runs").exists()
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
