"""`fks validate` refuses configs whose types, keys or numbers are only almost right."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import one_line_error

SHOWN = "forge/chains.json: "


def write_raw(project: Path, text: str) -> None:
    (project / "forge").mkdir(exist_ok=True)
    (project / "forge" / "chains.json").write_text(text)


def chain(**step: object) -> dict[str, Any]:
    return {"chains": {"ralph": {"steps": [{"agent": "a"}, {"agent": "b", **step}]}}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (chain(iterations="3"), "chains.ralph.steps[1].iterations: must be a positive integer"),
        (chain(iterations=True), "chains.ralph.steps[1].iterations: must be a positive integer"),
        (chain(iterations=10_001), "chains.ralph.steps[1].iterations: must be at most 10,000"),
        (chain(agent="a\x1bb"), "chains.ralph.steps[1].agent: contains the control character"),
        ({"agents": {"x": {"maxTurns": "5"}}}, "agents.x.maxTurns: must be a positive integer"),
        ({"noProgressLimit": False}, "noProgressLimit: must be an integer"),
        ({"sandbox": {"cpus": "2"}}, "sandbox.cpus: must be a number"),
        ({"sandbox": {"cpus": True}}, "sandbox.cpus: must be a number"),
        ({"sandbox": {"memory": "0"}}, "sandbox.memory: must be a positive size"),
        ({"sandbox": {"memory": "0.0g"}}, "sandbox.memory: must be a positive size"),
        ({"sandbox": {"env": ["OK_1", "NOT-OK"]}}, "sandbox.env: 'NOT-OK' is not an environment"),
        ({"sandbox": {"env": ["1ABC"]}}, "sandbox.env: '1ABC' is not an environment variable"),
        (
            {"chains": {"c": {"steps": [{"agent": "a"}] * 1001}}},
            "chains.c.steps: must have at most 1,000 entries",
        ),
    ],
)
def test_schema_is_strict(project: Path, cli: Any, data: dict[str, Any], message: str) -> None:
    write_raw(project, json.dumps(data))
    one_line_error(cli("validate"), SHOWN + message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"chains": {}, "chains": {}}', "key 'chains' appears twice in one object"),
        ('{"sandbox": {"cpus": NaN}}', "NaN is not a JSON number"),
        ('{"sandbox": {"timeout": Infinity}}', "Infinity is not a JSON number"),
        ('{"sandbox": {"timeout": -Infinity}}', "-Infinity is not a JSON number"),
        ('{"rateLimitMaxWait": 1e999}', "rateLimitMaxWait: must be a finite number"),
    ],
)
def test_json_is_strict(project: Path, cli: Any, text: str, message: str) -> None:
    write_raw(project, text)
    one_line_error(cli("validate"), SHOWN + message)


def test_valid_config_still_loads(project: Path, cli: Any) -> None:
    write_raw(
        project,
        json.dumps(
            {
                "sandbox": {"cpus": 2, "timeout": 1.5, "memory": "512m", "env": ["MY_TOKEN"]},
                "chains": {"c": {"steps": [{"agent": "fake", "iterations": 10_000}]}},
            }
        ),
    )
    result = cli("validate")
    assert result.code == 0, result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_max_cost_must_be_positive_and_finite(project: Path, cli: Any, value: str) -> None:
    one_line_error(cli("run", "fake", "--max-cost", value), "--max-cost must be a positive")
