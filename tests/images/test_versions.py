"""The pinned Claude Code version, --claude-version, the image labels and the stale-image warning."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo

from sandbox_runner import __version__
from sandbox_runner.errors import SandboxError, UsageError
from sandbox_runner.images import build_helper, lookup, versions

REPO = Path(__file__).resolve().parents[2]
PINNED = versions.CLAUDE_CODE_VERSION


def test_default_is_the_pinned_version_and_exact_versions_pass() -> None:
    assert versions.resolve_claude_version(None) == PINNED
    assert versions.resolve_claude_version("2.0.1") == "2.0.1"
    assert versions.resolve_claude_version("2.1.0-beta.1") == "2.1.0-beta.1"


def test_the_test_script_installs_the_pinned_version_on_the_host() -> None:
    """scripts/test installs the release the suite runs, so the pin is what was tested."""
    script = (REPO / "scripts" / "test").read_text()
    assert "import CLAUDE_CODE_VERSION" in script
    assert '"@anthropic-ai/claude-code@$pinned"' in script


@pytest.mark.parametrize("bad", ["2.1", "v2.1.0", "2.1.0; rm -rf /", "newest", ""])
def test_a_bad_claude_version_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match=r"is not a version; give X\.Y\.Z .* or 'latest'"):
        versions.resolve_claude_version(bad)


def test_bad_claude_version_on_the_command_line_is_one_line_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sandbox_runner", "image", "build", "--claude-version", "two"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"fks: --claude-version 'two' is not a version; give X.Y.Z (e.g. {PINNED}) or 'latest'"
    ]


def test_latest_is_asked_of_the_registry_and_a_dead_registry_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import http.server
    import threading

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"latest": "9.8.7", "next": "9.9.0"}).encode()
            ok = self.path == "/-/package/@anthropic-ai/claude-code/dist-tags"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("NPM_CONFIG_REGISTRY", f"http://127.0.0.1:{server.server_port}/")
        assert versions.resolve_claude_version("latest") == "9.8.7"
    finally:
        server.shutdown()
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", f"http://127.0.0.1:{server.server_port}")
    with pytest.raises(SandboxError, match=r"pass --claude-version X\.Y\.Z instead$") as caught:
        versions.resolve_claude_version("latest")
    assert "\n" not in str(caught.value)


def test_labels_record_the_versions() -> None:
    assert versions.image_labels(PINNED) == {
        "fks.version": __version__,
        "fks.claude-code.version": PINNED,
        "fks.claude-code.pinned": "true",
    }
    assert versions.image_labels("1.0.0")["fks.claude-code.pinned"] == "false"


def _labels(fks: str | None, claude: str | None, pinned: str = "true") -> dict[str, str]:
    found = {"org.opencontainers.image.title": "fks-agent", "fks.claude-code.pinned": pinned}
    if fks is not None:
        found["fks.version"] = fks
    if claude is not None:
        found["fks.claude-code.version"] = claude
    return found


def test_version_warning() -> None:
    def warn(labels: dict[str, str] | None) -> str | None:
        return versions.version_warning("img:1", labels, rebuild="fks image build --tag img:1")

    assert warn(_labels(__version__, PINNED)) is None
    assert warn(None) is None  # not an fks image: the user's own
    assert warn({"maintainer": "me"}) is None
    # Built with --claude-version: another Claude Code is what the user asked for.
    assert warn(_labels(__version__, "1.0.0", pinned="false")) is None
    assert warn(_labels("0.0.1", PINNED)) == (
        f"image img:1 holds fks 0.0.1 (this is {__version__}); "
        "rebuild it with 'fks image build --tag img:1'"
    )
    assert warn(_labels(__version__, "1.0.0")) == (
        f"image img:1 holds Claude Code 1.0.0 (expected {PINNED}); "
        "rebuild it with 'fks image build --tag img:1'"
    )
    # An fks-agent image from before the labels existed.
    assert warn({"org.opencontainers.image.title": "fks-agent"}) == (
        f"image img:1 holds fks of an older release (this is {__version__}) and Claude Code of "
        f"unknown version (expected {PINNED}); rebuild it with 'fks image build --tag img:1'"
    )


@pytest.mark.parametrize(
    ("machine", "libc", "package"),
    [
        ("x86_64", "glibc", "@anthropic-ai/claude-code-linux-x64"),
        ("aarch64", "glibc", "@anthropic-ai/claude-code-linux-arm64"),
        ("x86_64", "", "@anthropic-ai/claude-code-linux-x64-musl"),
        ("aarch64", "", "@anthropic-ai/claude-code-linux-arm64-musl"),
    ],
)
def test_the_native_package_for_the_platform(
    monkeypatch: pytest.MonkeyPatch, machine: str, libc: str, package: str
) -> None:
    monkeypatch.setattr(build_helper.platform, "machine", lambda: machine)
    monkeypatch.setattr(build_helper.platform, "libc_ver", lambda: (libc, ""))
    assert build_helper.platform_package() == package


def test_no_native_build_for_other_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_helper.platform, "machine", lambda: "riscv64")
    with pytest.raises(SystemExit, match="fks: Claude Code has no native build for riscv64"):
        build_helper.platform_package()


def test_dependency_names() -> None:
    assert build_helper._bare(" libc6 (>= 2.34)") == "libc6"
    assert build_helper._bare("python3:any") == "python3"
    assert build_helper._dropped("perl-modules-5.36")
    assert build_helper._dropped("python3.12-venv")
    assert not build_helper._dropped("python3")


# --- the warning in a real run (needs Docker and the agent image) -----------------------------


@pytest.fixture
def stale_image() -> Iterator[str]:
    """The agent image relabelled as if an older fks with another Claude Code had built it."""
    tag = f"fks-agent:stale-{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {lookup.DEFAULT_AGENT_IMAGE}\n"
    built = subprocess.run(
        [
            *("docker", "build", "-q", "-t", tag),
            *("--label", "fks.version=0.0.1", "--label", "fks.claude-code.version=1.0.0", "-"),
        ],
        input=dockerfile,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.mark.docker
def test_run_warns_once_about_a_stale_image(stale_image: str, tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"agent.sh": "#!/bin/sh\necho hello\n"})
    (repo / "agent.sh").chmod(0o755)
    git(repo, "commit", "-qam", "executable")
    res = fks("run", "./agent.sh -> ./agent.sh", "--sandbox", "--image", stale_image, cwd=repo)
    assert res.code == 0, res.output[-2000:]
    shown = [line for line in res.output.splitlines() if "rebuild it with" in line]
    assert shown == [
        f"[fks] Warning: image {stale_image} holds fks 0.0.1 (this is {__version__}) and Claude "
        f"Code 1.0.0 (expected {PINNED}); rebuild it with 'fks image build --tag {stale_image}'"
    ]
