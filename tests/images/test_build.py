"""The agent image: build context, base choice, Docker errors, and (-m docker) the built image."""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox_runner import __version__, docker_daemon
from sandbox_runner import labels as fks_labels
from sandbox_runner.errors import SandboxError
from sandbox_runner.images import base_image, build, lookup, versions

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "sandbox_runner" / "images"
# Only the PEM shape is checked before a build, so a truncated body will do.
PEM = """\
-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIUQ2ZrF0mU2l5bX1xJZb9wWcGq3tUwCgYIKoZIzj0EAwIw
GDEWMBQGA1UEAwwNZmtzLXRlc3QtY2EtMTAeFw0yNDAxMDEwMDAwMDBaFw0yNDAx
MDIwMDAwMDBaMBgxFjAUBgNVBAMMDWZrcy10ZXN0LWNhLTEwWTATBgcqhkjOPQIB
-----END CERTIFICATE-----
"""


def fks(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "sandbox_runner", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --- build context ---------------------------------------------------------------------------


def test_context_holds_dockerfile_source_and_certs(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "corp.pem").write_text(PEM)
    (tmp_path / "corp.crt").write_text(PEM)  # same stem: must not overwrite the first
    ctx = build.assemble_context(
        tmp_path / "ctx", ca_certs=[certs / "corp.pem", tmp_path / "corp.crt"]
    )

    assert (ctx / "Dockerfile.agent").read_text() == (IMAGES / "agent/Dockerfile").read_text()
    helper = IMAGES / "build_helper.py"
    assert (ctx / "build_helper.py").read_text() == helper.read_text()
    assert sorted(p.name for p in (ctx / "ca-certs").iterdir()) == ["corp-2.crt", "corp.crt"]
    source = ctx / "fks" / "sandbox_runner"
    app_module = Path("cli", "app.py")
    assert (source / app_module).read_text() == (REPO / "sandbox_runner" / app_module).read_text()
    assert (source / "images" / "agent" / "Dockerfile").is_file()
    assert not list(source.rglob("__pycache__")) and not list(source.rglob("*.pyc"))

    project = tomllib.loads((ctx / "fks" / "pyproject.toml").read_text())
    dist = importlib.metadata.distribution("fks")
    assert project["project"]["name"] == "fks"
    assert project["project"]["version"] == __version__
    assert project["project"]["scripts"] == {
        "fks": "sandbox_runner.cli:main",
        "forge-tasks": "sandbox_runner.tasks.cli:main",
    }
    runtime = [r for r in dist.requires or [] if "extra" not in r]
    assert project["project"]["dependencies"] == runtime
    requirements = (ctx / "fks" / "requirements.txt").read_text().splitlines()
    # Only the host talks to Docker, notification services and GitHub: the image's fks runs
    # forge-tasks.
    host_only = ("docker", "tenacity", "apprise", "httpx")
    in_image = [r for r in runtime if not r.lower().startswith(host_only)]
    assert requirements[: len(in_image)] == in_image
    assert any(r.startswith("pydantic") for r in requirements)
    assert not any(r.startswith(("pytest", *host_only)) for r in requirements)


def test_proxy_context_holds_its_dockerfile_and_the_certs_only(tmp_path: Path) -> None:
    (tmp_path / "corp.pem").write_text(PEM)
    ctx = build.assemble_proxy_context(tmp_path / "ctx", ca_certs=[tmp_path / "corp.pem"])
    assert (ctx / "Dockerfile.proxy").read_text() == (IMAGES / "proxy/Dockerfile").read_text()
    assert sorted(p.relative_to(ctx).as_posix() for p in ctx.rglob("*")) == [
        "Dockerfile.proxy",
        "ca-certs",
        "ca-certs/corp.crt",
    ]
    with pytest.raises(SandboxError, match=r"CA certificate .*nope.crt not found"):
        build.assemble_proxy_context(tmp_path / "ctx2", ca_certs=[tmp_path / "nope.crt"])


def test_context_from_an_installed_package_without_checkout(tmp_path: Path) -> None:
    """A wheel install has the package directory only (the Dockerfile in it)."""
    installed = tmp_path / "site-packages" / "sandbox_runner"
    shutil.copytree(build.PACKAGE_DIR, installed, symlinks=False)
    ctx = build.assemble_context(tmp_path / "ctx", ca_certs=[], package_dir=installed)
    assert (ctx / "Dockerfile.agent").read_text() == (IMAGES / "agent/Dockerfile").read_text()
    assert list((ctx / "ca-certs").iterdir()) == []

    (installed / "images" / "agent" / "Dockerfile").unlink()
    with pytest.raises(SandboxError, match=r"agent/Dockerfile is missing; reinstall fks"):
        build.assemble_context(tmp_path / "ctx2", ca_certs=[], package_dir=installed)


@pytest.mark.parametrize("name", ["agent", "proxy", "layer"])
def test_dockerfile_is_package_data(name: str) -> None:
    assert (IMAGES / name / "Dockerfile").is_file()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]["sandbox_runner"]
    assert f"images/{name}/Dockerfile" in data


def test_wheel_ships_the_dockerfile(tmp_path: Path) -> None:
    """setuptools puts the package's Dockerfiles into the wheel."""
    project = tmp_path / "project"
    shutil.copytree(
        REPO / "sandbox_runner",
        project / "sandbox_runner",
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, project / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), "."],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=project,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("fks-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        for name in ("agent", "proxy", "layer"):
            dockerfile = f"images/{name}/Dockerfile"
            assert (
                zf.read(f"sandbox_runner/{dockerfile}").decode()
                == (IMAGES.parent / dockerfile).read_text()
            )


def test_dockerfile_layers_and_defaults() -> None:
    """What the image promises, in the order that keeps rebuilds fast."""
    text = (IMAGES / "agent/Dockerfile").read_text()
    assert text.count("ARG BASE_IMAGE=debian:bookworm-slim") == 1
    assert "FROM ${BASE_IMAGE} AS system" in text
    order = [
        "COPY ca-certs/",
        "update-ca-certificates",
        "apt-get update",
        "build_helper.py rootfs /rootfs",
        "FROM system AS claude",
        "build_helper.py claude",
        "FROM system AS fks",
        "COPY fks/requirements.txt",
        "COPY fks/ /opt/fks/src/",
        "FROM scratch",
        "COPY --from=system /rootfs/ /",
        "COPY --from=claude /out/claude /usr/local/bin/claude",
        "COPY --from=fks /opt/fks /opt/fks",
        "USER fks",
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "--no-install-recommends" in text
    assert "rm -rf /var/lib/apt/lists/*" in text
    assert re.search(r"apt-get install [^;]* socat;", text), "the egress forwarder needs socat"
    # Node and npm are never installed, not even in a build stage.
    assert not re.search(r"\b(nodejs|npm install)\b", text)


def test_proxy_dockerfile_defaults() -> None:
    text = (IMAGES / "proxy/Dockerfile").read_text()
    assert text.count("ARG BASE_IMAGE=debian:bookworm-slim") == 1
    assert "FROM ${BASE_IMAGE}" in text
    assert text.index("COPY ca-certs/") < text.index("update-ca-certificates")
    assert re.search(
        r"apt-get install -y --no-install-recommends ca-certificates openssl socat squid-openssl "
        r"mitmproxy;",
        text,
    )
    assert "chown proxy:proxy /fks-proxy" in text
    assert "USER proxy" in text


# --- command line errors -----------------------------------------------------------------------


def test_missing_ca_cert_is_a_one_line_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.crt"
    result = fks("image", "build", "--ca-cert", str(missing))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"fks: CA certificate {missing} not found; pass an existing PEM file to --ca-cert"
    ]
    assert result.stdout == ""


def test_non_pem_ca_cert_is_refused(tmp_path: Path) -> None:
    der = tmp_path / "corp.der"
    der.write_bytes(b"\x30\x82\x01\x0a binary")
    result = fks("image", "build", "--ca-cert", str(der))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"fks: CA certificate {der} is not a PEM certificate")


def test_no_docker_daemon_is_a_one_line_error_with_the_fix(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "docker").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "docker").chmod(0o755)
    socket = tmp_path / "docker.sock"
    result = fks("image", "build", env={"DOCKER_HOST": f"unix://{socket}", "PATH": str(fake_bin)})
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"fks: Docker daemon not running (cannot connect to unix://{socket}")
    assert line.endswith("start it (e.g. 'sudo systemctl start docker' or 'dockerd &')")


def test_docker_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match=r"^Docker is not installed .*install it"):
        docker_daemon.docker_client()


def test_socket_permission_denied_names_the_docker_group() -> None:
    try:
        try:
            raise PermissionError(13, "Permission denied")
        except PermissionError as inner:
            raise RuntimeError("Error while fetching server API version") from inner
    except RuntimeError as exc:
        message = docker_daemon._unreachable_daemon_message(exc)
    assert message.startswith("Permission denied on the Docker socket")
    assert "'docker' group" in message


def _client_without(*present: str) -> Any:
    import docker

    def get(name: str) -> object:
        if name in present:
            return SimpleNamespace(id="sha256:" + "0" * 64)
        raise docker.errors.ImageNotFound(f"No such image: {name}")

    return SimpleNamespace(images=SimpleNamespace(get=get))


def test_require_image_names_the_build_command() -> None:
    default = lookup.DEFAULT_AGENT_IMAGE  # fks-agent:latest unless FKS_AGENT_IMAGE says
    lookup.require_image(_client_without(default), default)
    with pytest.raises(SandboxError) as caught:
        lookup.require_image(_client_without(), default)
    assert str(caught.value) == f"Image {default!r} not found; build it with 'fks image build'"
    with pytest.raises(SandboxError, match=r"'fks image build --tag my:tag'"):
        lookup.require_image(_client_without(), "my:tag")
    with pytest.raises(
        SandboxError, match=r"^Image 'fks-proxy:latest' not found; .*'fks image build'$"
    ):
        lookup.require_image(_client_without(), "fks-proxy:latest")


def test_make_base_module_usage() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sandbox_runner.images.base_image", "bogus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "usage: python -m sandbox_runner.images.base_image make-base [--force]" in result.stderr


def test_make_base_skips_an_existing_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_docker = tmp_path / "docker"
    fake_docker.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\nexit 0\n')
    fake_docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    said: list[str] = []
    assert base_image.make_base_image(say=said.append) is False
    assert said == ["fks-base:bookworm already exists; not remaking it (use --force to)"]
    assert (tmp_path / "calls").read_text() == "image inspect fks-base:bookworm\n"


# --- which base -----------------------------------------------------------------------------


class Engine:
    """Fake image store for resolve_base_image: which images exist, whether pulls work."""

    def __init__(self, *present: str, registry: bool) -> None:
        self.present = set(present)
        self.registry = registry
        self.pulled: list[str] = []
        self.made = 0
        self.said: list[str] = []

    def resolve(self, requested: str | None) -> str:
        return base_image.resolve_base_image(
            requested,
            is_present=lambda name: name in self.present,
            pull=self.pull,
            make_local_base=self.make,
            say=self.said.append,
        )

    def pull(self, name: str) -> None:
        self.pulled.append(name)
        if not self.registry:
            raise SandboxError(f"cannot pull {name}: no such host")
        self.present.add(name)

    def make(self) -> None:
        self.made += 1
        self.present.add(base_image.LOCAL_BASE_IMAGE)


def test_present_base_is_used_without_pulling() -> None:
    engine = Engine("debian:bookworm-slim", registry=False)
    assert engine.resolve(None) == "debian:bookworm-slim"
    assert engine.pulled == [] and engine.said == []


def test_missing_base_is_pulled() -> None:
    engine = Engine(registry=True)
    assert engine.resolve("ubuntu:24.04") == "ubuntu:24.04"
    assert engine.pulled == ["ubuntu:24.04"] and engine.made == 0


def test_unpullable_default_base_falls_back_to_the_local_one_saying_so() -> None:
    engine = Engine(registry=False)
    assert engine.resolve(None) == "fks-base:bookworm"
    assert engine.made == 1
    assert engine.said == [
        "fks: cannot pull debian:bookworm-slim: no such host; "
        "using the locally made base fks-base:bookworm instead"
    ]
    assert engine.resolve(None) == "fks-base:bookworm"
    assert engine.made == 1  # made once, then reused


def test_unpullable_explicit_base_is_an_error_not_a_fallback() -> None:
    engine = Engine(registry=False)
    with pytest.raises(SandboxError) as caught:
        engine.resolve("corp/base:1")
    assert str(caught.value).startswith(
        "Base image 'corp/base:1' is not available locally and cannot pull corp/base:1"
    )
    assert "omit --base-image" in str(caught.value)
    assert engine.made == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("debian:bookworm-slim", ("debian", "bookworm-slim")),
        ("debian", ("debian", "latest")),
        ("registry.local:5000/img", ("registry.local:5000/img", "latest")),
        ("registry.local:5000/img:1", ("registry.local:5000/img", "1")),
    ],
)
def test_split_tag(name: str, expected: tuple[str, str]) -> None:
    assert lookup.split_tag(name) == expected


# --- build output ----------------------------------------------------------------------------


def test_image_build_builds_the_proxy_then_the_agent_from_one_base(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[str, str, list[str]]] = []
    tagged: list[tuple[str, str]] = []

    def build_image(_client: object, context: Path, **kwargs: Any) -> str:
        files = sorted(p.name for p in context.iterdir())
        built.append((kwargs["tag"], kwargs["base_image"], files))
        return "sha256:" + kwargs["tag"]

    def tag_image(_client: object, image_id: str, name: str) -> str:
        tagged.append((image_id, name))
        return image_id

    monkeypatch.setattr(build, "docker_client", lambda: _client_without("fks-base:bookworm"))
    monkeypatch.setattr(build, "build_image", build_image)
    monkeypatch.setattr(build, "tag_image", tag_image)
    image_id = build.build_agent_image(
        base_image="fks-base:bookworm", ca_certs=[], tag="my:tag", out=io.StringIO()
    )
    assert image_id == "sha256:my:tag"
    assert built == [
        ("fks-proxy:latest", "fks-base:bookworm", ["Dockerfile.proxy", "ca-certs"]),
        ("my:tag", "fks-base:bookworm", ["Dockerfile.agent", "build_helper.py", "ca-certs", "fks"]),
    ]
    assert tagged == [("sha256:fks-proxy:latest", "fks-proxy:latest"), ("sha256:my:tag", "my:tag")]


# --- the built image (needs Docker and `fks image build` / scripts/build-images) -------------

IMAGE = os.environ.get("FKS_TEST_IMAGE", lookup.DEFAULT_AGENT_IMAGE)


@pytest.fixture(scope="module")
def agent_image() -> Iterator[str]:
    try:
        lookup.require_image(docker_daemon.docker_client(), IMAGE)
    except SandboxError as exc:
        pytest.fail(f"{exc} (scripts/build-images makes it)")
    yield IMAGE


def docker_run(
    image: str, *cmd: str, user: str | None = None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    argv = ["docker", "run", "--rm", *(["--user", user] if user else []), *args, image, *cmd]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.docker
def test_image_has_the_tools(agent_image: str) -> None:
    script = (
        "claude --version && git --version && fks --version && forge-tasks --help >/dev/null "
        "&& python3 --version && curl --version >/dev/null && echo abc | rev"
        " && for t in claude fks forge-tasks; do command -v $t; done"
    )
    result = docker_run(agent_image, "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"{versions.CLAUDE_CODE_VERSION} (Claude Code)"
    assert out[1].startswith("git version ")
    assert out[2] == f"fks {__version__}"
    assert out[3].startswith("Python 3.")
    assert out[4] == "cba"
    assert out[-3:] == ["/usr/local/bin/claude", "/usr/local/bin/fks", "/usr/local/bin/forge-tasks"]


@pytest.mark.docker
def test_image_is_slim_and_labelled(agent_image: str) -> None:
    """The native Claude Code binary only: no Node, npm, package manager or Perl, <= 350 MB."""
    image = docker_daemon.docker_client().images.get(agent_image)
    assert image.attrs["Size"] <= 350 * 10**6, f"{image.attrs['Size'] / 1e6:.0f} MB"
    assert image.labels[fks_labels.LABEL_FKS_VERSION] == __version__
    assert image.labels[fks_labels.LABEL_CLAUDE_VERSION] == versions.CLAUDE_CODE_VERSION
    assert image.labels[fks_labels.LABEL_CLAUDE_PINNED] == "true"
    absent = "node npm npx apt-get dpkg perl pip pip3"
    result = docker_run(agent_image, "sh", "-c", f"for t in {absent}; do command -v $t; done; true")
    assert result.stdout == "", f"present in the slim image: {result.stdout.split()}"


@pytest.mark.docker
def test_proxy_image_has_squid_and_socat_and_runs_as_proxy(agent_image: str) -> None:
    lookup.require_image(docker_daemon.docker_client(), lookup.DEFAULT_PROXY_IMAGE)
    script = (
        "squid -v | head -1; squid -v | grep -o -- --with-openssl; command -v socat; id -un;"
        " stat -c %U /fks-proxy /var/log/squid"
    )
    result = docker_run(lookup.DEFAULT_PROXY_IMAGE, "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0].startswith("Squid Cache: Version ")
    assert out[1:] == ["--with-openssl", "/usr/bin/socat", "proxy", "proxy", "proxy"]
    agent = docker_run(agent_image, "sh", "-c", "command -v socat")
    assert agent.stdout.strip() == "/usr/bin/socat"


@pytest.mark.docker
def test_image_runs_as_non_root_user_fks(agent_image: str) -> None:
    result = docker_run(agent_image, "sh", "-c", 'id -u; id -un; echo "$HOME"; pwd')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["1000", "fks", "/home/fks", "/workspace"]


@pytest.mark.docker
def test_image_env(agent_image: str) -> None:
    result = docker_run(agent_image, "env")
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CONFIG_DIR"] == "/home/fks/.claude"
    assert env["HOME"] == "/home/fks"
    for name in ("NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        assert env[name] == "/etc/ssl/certs/ca-certificates.crt"


@pytest.mark.docker
def test_image_works_as_an_arbitrary_uid(agent_image: str) -> None:
    script = (
        "claude --version && fks --version && forge-tasks --help >/dev/null"
        ' && touch "$CLAUDE_CONFIG_DIR/probe" "$HOME/probe"'
        " && git config --global user.name someone && git init -q /tmp/r"
    )
    result = docker_run(agent_image, "sh", "-c", script, user="12345:12345")
    assert result.returncode == 0, result.stderr
    assert f"fks {__version__}" in result.stdout


@pytest.mark.docker
def test_extra_ca_certificates_are_in_the_system_bundle(agent_image: str) -> None:
    script = (
        'set -e; for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] || continue;'
        " body=$(grep -v -- ----- \"$f\" | tr -d '\\n' | cut -c1-64);"
        ' tr -d "\\n" < /etc/ssl/certs/ca-certificates.crt | grep -q -- "$body"; echo "$f"; done'
    )
    result = docker_run(agent_image, "sh", "-c", script)
    assert result.returncode == 0, f"a certificate is missing from the bundle: {result.stderr}"


@pytest.mark.docker
@pytest.mark.claude
def test_claude_commits_in_a_mounted_repo_as_the_host_uid(agent_image: str, tmp_path: Path) -> None:
    """The real CLI in the image, driven by the fake API, as a uid absent from /etc/passwd."""
    from fks_testing.fakeapi import FakeAnthropic

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    command = "echo hi > f.txt && git add f.txt && git commit -qm 'agent commit'"
    script = [
        [
            [
                {"text": "Working."},
                {"tool": "Bash", "input": {"command": command, "description": "c"}},
            ],
            [{"text": "Done.\nFORKHESTRA_COMPLETE"}],
        ]
    ]
    uid = os.getuid() or 12345
    os.chown(tmp_path, uid, uid)
    for path in [repo, *repo.rglob("*")]:
        os.chown(path, uid, uid)
    with FakeAnthropic({"conversations": script}, host="0.0.0.0") as fake:
        env = fake.env("/home/fks/.claude")
        env_args = tuple(arg for key, value in env.items() for arg in ("-e", f"{key}={value}"))
        result = docker_run(
            agent_image,
            "claude",
            "-p",
            "commit a file",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--max-turns",
            "4",
            user=f"{uid}:{uid}",
            args=("--network", "host", "-v", f"{repo}:/workspace", *env_args),
        )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert '"subtype":"success"' in result.stdout
    log = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), "log", "--format=%an|%s"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert log.stdout.splitlines() == ["fks agent|agent commit"]
    assert (repo / "f.txt").stat().st_uid == uid


@pytest.mark.docker
def test_source_change_rebuilds_only_the_last_layers(agent_image: str, tmp_path: Path) -> None:
    """Same base and certificates as the built image, edited fks source: apt/npm/pip cached."""
    client = docker_daemon.docker_client()
    image = client.images.get(agent_image)
    base = image.labels["org.opencontainers.image.base.name"]
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    container = client.containers.create(agent_image, "true")
    try:
        bits, _ = container.get_archive("/usr/local/share/ca-certificates")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
            tar.extractall(certs_dir, filter="data")
    finally:
        container.remove()
    certs = sorted((certs_dir / "ca-certificates").glob("*.crt"))

    source = tmp_path / "sandbox_runner"
    shutil.copytree(build.PACKAGE_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    marker = f"rebuild-test {uuid.uuid4()}"
    with (source / "errors.py").open("a") as f:
        f.write(f"# {marker}\n")
    ctx = build.assemble_context(tmp_path / "ctx", ca_certs=certs, package_dir=source)

    tag = f"fks-agent:rebuild-test-{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    claude = image.labels[fks_labels.LABEL_CLAUDE_VERSION]
    try:
        build.build_context(
            client,
            ctx,
            base_image=base,
            tag=tag,
            out=out,
            buildargs={"CLAUDE_CODE_VERSION": claude, "NPM_REGISTRY": versions.npm_registry()},
        )
        lines = out.getvalue().splitlines()
        cached = [
            line
            for line, following in zip(lines, [*lines[1:], ""], strict=True)
            if line.startswith("Step ") and following == " ---> Using cache"
        ]
        for expensive in ("update-ca-certificates", "build_helper.py claude", "python3 -m venv"):
            assert any(expensive in step for step in cached), f"{expensive!r} step was rebuilt"
        assert not any("COPY fks/ " in step for step in cached)
        result = docker_run(
            tag, "sh", "-c", "grep -r --include=errors.py -l 'rebuild-test' /opt/fks/lib"
        )
        assert result.returncode == 0, "the rebuilt image does not hold the edited source"
    finally:
        with_tag = [img for img in client.images.list() if tag in img.tags]
        if with_tag:
            client.images.remove(tag)
