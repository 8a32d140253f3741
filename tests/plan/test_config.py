from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.helpers import write_config

from sandbox_runner.errors import ConfigError, UsageError
from sandbox_runner.plan.config import load_config, parse_vars
from sandbox_runner.plan.planned import chain_plan


def load(project: Path, data: object) -> object:
    path = project / "forge" / "chains.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return load_config(path, cwd=project, required=True)


def test_missing_file_is_fine_unless_required(tmp_path: Path) -> None:
    path = tmp_path / "forge" / "chains.json"
    assert load_config(path, cwd=tmp_path, required=False) is None
    with pytest.raises(ConfigError, match=r"not found.*fks init"):
        load_config(path, cwd=tmp_path, required=True)


def test_invalid_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "chains.json"
    path.write_text('{"chains": {\n  "a": }')
    with pytest.raises(ConfigError, match=r"invalid JSON at line 2 column"):
        load_config(path, cwd=tmp_path, required=True)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"chains": {"r": {"steps": [{"agent": "a"}, {"agent": "b", "iterations": 0}]}}},
            "chains.r.steps[1].iterations: must be a positive integer",
        ),
        (
            {"chains": {"r": {"steps": [{"agent": "a", "iterations": "3"}]}}},
            "chains.r.steps[0].iterations: must be a positive integer",
        ),
        ({"chains": {"r": {"steps": []}}}, "chains.r.steps: must not be empty"),
        ({"agents": {"x": {"cli": "codex", "model": ""}}}, "agents.x.model: must not be empty"),
        ({"agents": {"x": {"path": ""}}}, "agents.x.path: must not be empty"),
        (
            {"chains": {"r": {"steps": [{"agent": ""}]}}},
            "chains.r.steps[0].agent: must not be empty",
        ),
        (
            {"chains": {"r": {"steps": [{"agent": "a", "bogus": 1}]}}},
            "chains.r.steps[0].bogus: unknown key",
        ),
        ({"agents": {"x": {"maxTurns": -1}}}, "agents.x.maxTurns: must be a positive integer"),
        ({"agents": {"x": {"allowedTools": "Bash"}}}, "agents.x.allowedTools: must be a list"),
        (
            {"chains": {"r": {"prompt": 3, "steps": [{"agent": "a"}]}}},
            "chains.r.prompt: must be a string",
        ),
        ({"sandbox": {"network": "none", "cpus": 0}}, "sandbox.cpus: must be a positive number"),
        ({"unknown": {}}, "unknown: unknown key"),
        (
            {"sandbox": {"memory": "lots"}},
            "sandbox.memory: must be a positive size like 512m or 2g",
        ),
    ],
)
def test_schema_errors_name_file_and_path(
    tmp_path: Path, data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data)
    assert str(info.value).startswith("forge/chains.json: ")
    assert message in str(info.value)


def test_missing_system_prompt_fails_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {"agents": {"fk:planner": {"systemPrompt": "prompts/foo.md"}}})
    assert (
        "Agent 'fk:planner' references systemPrompt 'prompts/foo.md' which does not exist"
        in str(info.value)
    )


def test_missing_prompt_file_fails_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"promptFile references 'nope\.md' which does not exist"):
        load(tmp_path, {"chains": {"c": {"steps": [{"agent": "a", "promptFile": "nope.md"}]}}})


def test_substitution_everywhere_and_all_missing_listed(tmp_path: Path) -> None:
    (tmp_path / "p-auth.md").write_text("x")
    cfg = load(
        tmp_path,
        {
            "chains": {
                "c": {
                    "prompt": "Work on ${FEATURE}",
                    "steps": [
                        {
                            "agent": "a",
                            "iterations": 2,
                            "args": ["--task", "${TASK_ID}"],
                            "promptFile": "p-${FEATURE}.md",
                        },
                        {"agent": "b", "prompt": "label ${LABEL}"},
                    ],
                }
            }
        },
    )
    with pytest.raises(UsageError) as info:
        chain_plan(cfg, "c", {"FEATURE": "auth"}, shown="forge/chains.json")  # type: ignore[arg-type]
    assert "TASK_ID, LABEL" in str(info.value)
    plan = chain_plan(cfg, "c", {"FEATURE": "auth", "TASK_ID": "T-1", "LABEL": "x"}, shown="f")  # type: ignore[arg-type]
    assert plan.prompt == "Work on auth"
    assert plan.steps[0].args == ("--task", "T-1")
    assert plan.steps[0].prompt_file == "p-auth.md"
    assert plan.steps[0].loop and plan.steps[0].iterations == 2
    assert not plan.steps[1].loop and plan.steps[1].prompt == "label x"


def test_unknown_chain_lists_available(tmp_path: Path) -> None:
    cfg = load(
        tmp_path, {"chains": {"b": {"steps": [{"agent": "x"}]}, "a": {"steps": [{"agent": "y"}]}}}
    )
    with pytest.raises(ConfigError, match="Chain 'zzz' not found in f; available chains: a, b"):
        chain_plan(cfg, "zzz", {}, shown="f")  # type: ignore[arg-type]


@pytest.mark.parametrize("pair", ["NOEQUALS", "=x", "1A=2", "A-B=1"])
def test_bad_var_pairs(pair: str) -> None:
    with pytest.raises(UsageError, match="VAR=value"):
        parse_vars([pair])


def test_var_values_keep_equals_signs() -> None:
    assert parse_vars(["A=b=c", "B="]) == {"A": "b=c", "B": ""}


def test_write_config_helper_roundtrip(project: Path) -> None:
    write_config(project, {"chains": {"x": {"steps": [{"agent": "fake"}]}}})
    assert load_config(project / "forge" / "chains.json", cwd=project, required=True) is not None
