"""`backends/docker/engine/connect.py` against a real second engine (testing/fks_testing/engines.py): a URL, a
Docker CLI context, TLS variables, and one line when the engine cannot be reached."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks

from sandbox_runner.backends.docker.engine.connect import engine_client
from sandbox_runner.errors import SandboxError
from sandbox_runner.plan.engine import EngineSpec

pytestmark = pytest.mark.docker


def engine_id(client: Any) -> str:
    """Which engine answers (both engines share the host's key, hence its engine ID)."""
    return str(client.info()["DockerRootDir"])


def test_a_tcp_url_reaches_that_engine(second_engine: Any) -> None:
    client = engine_client(EngineSpec.parse(second_engine.url))
    local = engine_client(EngineSpec.parse("local"))
    assert engine_id(client) == engine_id(second_engine.client())
    assert engine_id(client) != engine_id(local)


def write_context(config_dir: Path, name: str, host: str) -> None:
    """A context as `docker context create NAME --docker host=HOST` stores it."""
    meta = config_dir / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(
        json.dumps(
            {
                "Name": name,
                "Metadata": {},
                "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": False}},
            }
        )
    )


def test_a_context_is_read_from_the_docker_cli_store(
    second_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_context(tmp_path / "docker", "other-box", second_engine.url)
    write_context(tmp_path / "docker", "decoy", "tcp://127.0.0.1:1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    client = engine_client(EngineSpec.parse("context:other-box"))
    assert engine_id(client) == engine_id(second_engine.client())
    with pytest.raises(
        SandboxError, match=r"Docker context 'missing' not found in .*docker context ls"
    ):
        engine_client(EngineSpec.parse("context:missing"))


def test_the_context_store_the_docker_cli_writes_is_read(
    second_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a context made by the real `docker context create`."""
    import subprocess

    env_dir = tmp_path / "cli-config"
    done = subprocess.run(
        ["docker", "context", "create", "fkse-ctx", "--docker", f"host={second_engine.url}"],
        env={"DOCKER_CONFIG": str(env_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("DOCKER_CONFIG", str(env_dir))
    client = engine_client(EngineSpec.parse("context:fkse-ctx"))
    assert engine_id(client) == engine_id(second_engine.client())


def test_tls_variables_apply_to_tcp_and_a_missing_certificate_is_one_line(
    second_engine: Any, tmp_path: Path
) -> None:
    done = fks(
        "image",
        "push",
        "--engine",
        second_engine.url,
        "--image",
        "fks-proxy:latest",
        env={"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path / "certs")},
    )
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: engine {second_engine.url}: DOCKER_TLS_VERIFY/DOCKER_CERT_PATH ask for TLS but "
        f"{tmp_path / 'certs'} has no ca.pem, cert.pem, key.pem; set DOCKER_CERT_PATH to the "
        "directory with ca.pem, cert.pem and key.pem\n"
    )


def test_an_engine_that_does_not_answer_is_one_line_exit_2(second_engine: Any) -> None:
    # The second engine's address, a port nothing listens on: refused at once.
    url = f"tcp://{second_engine.ip}:2399"
    done = fks("image", "push", "--engine", url, "--image", "fks-proxy:latest")
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: Docker engine {url} not reachable: Connection refused; check that it runs and "
        "listens there (e.g. 'docker -H URL info')\n"
    )


def test_plain_tcp_without_tls_is_warned_once_naming_the_risk(
    second_engine: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_runner.backends.docker.engine import connect

    done = fks("image", "push", "--engine", second_engine.url, "--image", "fks-proxy:latest")
    assert done.code == 0, done.output
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == [
        f"fks: warning: engine {second_engine.url} is plain TCP without TLS (DOCKER_TLS_VERIFY "
        "is not set): anyone who reaches that port is root on its machine; use TLS "
        "(DOCKER_TLS_VERIFY=1, DOCKER_CERT_PATH) or ssh://USER@HOST"
    ], done.stderr
    monkeypatch.setattr(connect, "_warned", set())
    capsys.readouterr()
    for _ in range(3):  # in one process: once
        engine_client(EngineSpec.parse(second_engine.url))
    assert capsys.readouterr().err.count("plain TCP without TLS") == 1
