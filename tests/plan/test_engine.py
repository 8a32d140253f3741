"""`sandbox.engine` / `--engine` values: the forms that parse and the one line the others get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import write_config

from sandbox_runner.plan.engine import EngineSpec, EngineSpecError


@pytest.mark.parametrize(
    ("text", "kind", "url", "context"),
    [
        ("local", "local", None, None),
        ("tcp://10.231.0.2:2375", "tcp", "tcp://10.231.0.2:2375", None),
        ("tcp://build-box.example:2376", "tcp", "tcp://build-box.example:2376", None),
        ("ssh://me@box", "ssh", "ssh://me@box", None),
        ("ssh://me@box:2222", "ssh", "ssh://me@box:2222", None),
        ("context:build-box", "context", None, "build-box"),
        ("swarm", "swarm", None, None),
        ("swarm:tcp://10.0.0.1:2375", "swarm", "tcp://10.0.0.1:2375", None),
        ("swarm:ssh://me@manager", "swarm", "ssh://me@manager", None),
    ],
)
def test_engine_forms(text: str, kind: str, url: str | None, context: str | None) -> None:
    spec = EngineSpec.parse(text)
    assert (spec.kind, spec.url, spec.context, str(spec)) == (kind, url, context, text)
    assert spec.is_local == (text == "local")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("remote", "'remote' is not one of: local, tcp://HOST:PORT, ssh://USER@HOST"),
        ("http://box:2375", "is not one of"),
        ("unix:///var/run/docker.sock", "is not one of"),
        ("tcp://box", "give tcp://HOST:PORT"),
        ("tcp://me@box:2375", "give tcp://HOST:PORT"),
        ("tcp://box:99999", "the port must be 1-65535"),
        ("tcp://box:0", "the port must be 1-65535"),
        ("ssh://", "give ssh://USER@HOST"),
        ("ssh://me@box/path", "give ssh://USER@HOST"),
        ("context:", "'' is not a Docker context name"),
        ("context:a b", "is not a Docker context name"),
        ("swarm:box", "is not one of"),
        ("", "is not one of"),
    ],
)
def test_bad_engines_say_why(text: str, message: str) -> None:
    with pytest.raises(EngineSpecError) as caught:
        EngineSpec.parse(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("config", "line"),
    [
        (
            {"sandbox": {"engine": "tcp://box"}},
            "fks: forge/chains.json: sandbox.engine: 'tcp://box': give tcp://HOST:PORT",
        ),
        (
            {"chains": {"c": {"steps": [{"agent": "fake"}], "sandbox": {"engine": "kube"}}}},
            "fks: forge/chains.json: chains.c.sandbox.engine: 'kube' is not one of:",
        ),
        (
            {"sandbox": {"engine": 2375}},
            "fks: forge/chains.json: sandbox.engine:",
        ),
        (
            {"agents": {"fake": {"sandbox": {"engine": "local"}}}},
            "fks: forge/chains.json: agents.fake.sandbox: engine is chosen for a whole run",
        ),
    ],
)
def test_bad_engine_in_config_is_one_line_exit_2(
    project: Path, cli: Any, config: dict[str, Any], line: str
) -> None:
    write_config(project, config)
    result = cli("validate")
    assert result.code == 2
    assert result.stderr.startswith(line), result.stderr
    assert result.stderr.count("\n") == 1


def test_good_engine_in_config_validates(project: Path, cli: Any) -> None:
    write_config(project, {"sandbox": {"engine": "ssh://me@box"}})
    result = cli("validate")
    assert result.code == 0, result.output
