"""`fks run -p` substitutes `${VAR}` from VAR=value arguments, as the config's prompts do."""

from __future__ import annotations

from pathlib import Path

from fks_testing.helpers import calls, fks, write_config


def test_cli_prompt_variables_are_substituted_for_a_dsl(project: Path) -> None:
    res = fks("run", "fake", "-p", "Work on ${TASK_ID} (${TASK_ID})", "TASK_ID=T-1")
    assert res.code == 0, res.output
    assert [c["prompt"] for c in calls(project.parent)] == ["Work on T-1 (T-1)"]


def test_cli_prompt_variables_are_substituted_for_a_chain(project: Path) -> None:
    write_config(project, {"chains": {"c": {"steps": [{"agent": "fake"}]}}})
    res = fks("run", "--chain", "c", "-p", "Fix ${BUG}", "BUG=#12")
    assert res.code == 0, res.output
    assert [c["prompt"] for c in calls(project.parent)] == ["Fix #12"]


def test_cli_prompt_with_a_missing_variable_starts_nothing(project: Path) -> None:
    res = fks("run", "fake", "-p", "Work on ${TASK_ID}")
    assert res.code == 2, res.output
    assert res.stderr == (
        "fks: --prompt needs variable(s) not provided: TASK_ID (pass TASK_ID=…)\n"
    )
    assert calls(project.parent) == []
    assert not (project / ".forge").exists()
