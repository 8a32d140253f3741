"""Settings and environment checked before a sandboxed run starts: a model API on this
machine's loopback, which a container cannot reach, is refused with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

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
        ("http://127.0.0.1:8765/v1", None, "http://host.docker.internal:8765/v1"),
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


GVISOR = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host", "--host-uds=open"]}


@pytest.mark.parametrize(
    ("entry", "missing"),
    [
        ({"path": "/usr/bin/runsc"}, "--network=host --host-uds=open"),
        ({"path": "/usr/local/bin/runsc", "runtimeArgs": ["--network=host"]}, "--host-uds=open"),
        ({"path": "runsc", "runtimeArgs": ["--host-uds=all"]}, "--network=host"),
    ],
)
def test_gvisor_registered_without_the_flags_fks_needs_is_refused_naming_them(
    entry: dict[str, object], missing: str
) -> None:
    """What `docker info` lists for a runtime decides: gVisor without its own host network
    (where a step's containers meet the egress forwarders) or without connecting to the
    proxy's Unix socket would start and then fail; it is refused with the registration."""
    from sandbox_runner.backends.docker.checks import check_runtime
    from sandbox_runner.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        check_runtime({"runc": {"path": "runc"}, "gvisor": entry}, "gvisor", "sandbox")
    text = str(refused.value)
    assert (
        f"sandbox.runtime: the engine's runtime 'gvisor' (gVisor) runs without {missing}," in text
    )
    assert '"runtimeArgs": ["--network=host", "--host-uds=open"]' in text and "\n" not in text
    check_runtime({"gvisor": GVISOR}, "gvisor", "sandbox")  # as scripts/ensure-runsc registers it
    check_runtime(
        {"gvisor": {**GVISOR, "runtimeArgs": ["--network=host", "--host-uds=all"]}},
        "gvisor",
        "sandbox",
    )
    check_runtime({"kata": {"path": "/usr/bin/kata-runtime"}}, "kata", "sandbox")  # not gVisor


def test_a_loopback_api_url_is_refused_for_an_opencode_step_as_for_claude(tmp_path: Path) -> None:
    """OpenCode's Anthropic provider goes out through the egress proxy as Claude does."""
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(repo, {"agents": {"w": {"cli": "opencode"}}})
    git(repo, "add", "forge")
    git(repo, "commit", "-qm", "fks config")
    env = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:8765"}
    done = fks("run", "w", "--prompt", "Go.", "--sandbox", cwd=repo, env=env, timeout=60)
    assert done.code == 2, done.output
    assert "use http://host.docker.internal:8765" in done.stderr
