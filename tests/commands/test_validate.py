"""`fks validate` and `fks run --chain` on a config with several mistakes: every problem is
listed at once, names and keys close to known ones get a "did you mean", exit code 2, and a run
starts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import calls, fks, init_repo, write_config

TYPOS = {
    "agents": {
        "fk:builder": {"path": "fake", "modle": "sonnet"},
        "fk:planner": {"path": "fake", "maxTurns": 0},
    },
    "chains": {
        "ralph": {"steps": [{"agent": "fk:planner"}, {"agent": "fk:bulider", "iterations": 3}]},
    },
    "forge": {"paralel": 2},
}


def test_validate_lists_every_problem_with_did_you_mean(project: Path) -> None:
    write_config(project, TYPOS)
    res = fks("validate", cwd=project)
    assert res.code == 2, res.output
    assert "Traceback" not in res.output
    assert "more problem" not in res.output
    lines = res.stderr.splitlines()
    assert lines[0] == "fks: forge/chains.json: 4 problems:"
    assert set(lines[1:]) == {
        "  agents.fk:builder.modle: unknown key (did you mean 'model'?)",
        "  agents.fk:planner.maxTurns: must be a positive integer",
        "  forge.paralel: unknown key (did you mean 'parallel'?)",
        "  chains.ralph.steps[1].agent: agent 'fk:bulider' is not defined under 'agents' "
        "and not on PATH (did you mean 'fk:builder'?)",
    }


def test_validate_names_an_undefined_agent_of_a_valid_config(project: Path) -> None:
    write_config(
        project,
        {
            "agents": {"fk:builder": {"path": "fake"}},
            "chains": {"c": {"steps": [{"agent": "fk:bulider"}, {"agent": "fake"}]}},
        },
    )
    res = fks("validate", cwd=project)
    assert res.code == 2, res.output
    assert res.stderr == (
        "fks: forge/chains.json: chains.c.steps[0].agent: agent 'fk:bulider' is not defined "
        "under 'agents' and not on PATH (did you mean 'fk:builder'?)\n"
    )


def test_run_chain_with_an_undefined_agent_starts_nothing(project: Path) -> None:
    init_repo(project)
    write_config(
        project,
        {
            "agents": {"fk:builder": {"path": "fake"}},
            "chains": {"c": {"steps": [{"agent": "fake"}, {"agent": "fk:bulider"}]}},
        },
    )
    res = fks("run", "--chain", "c", "--sandbox", cwd=project)
    assert res.code == 2, res.output
    assert "did you mean 'fk:builder'?" in res.stderr
    assert calls(project.parent) == []
    assert not (project / ".forge" / "runs").exists() or not any(
        (project / ".forge" / "runs").iterdir()
    )


def test_run_suggests_chain_names_and_options(project: Path) -> None:
    write_config(project, {"chains": {"ralph": {"steps": [{"agent": "fake"}]}}})
    res = fks("run", "--chain", "rlaph", cwd=project)
    assert res.code == 2, res.output
    assert "Chain 'rlaph' not found in forge/chains.json (did you mean 'ralph'?)" in res.stderr
    res = fks("run", "--chian", "ralph", cwd=project)
    assert res.code == 2, res.output
    assert "no such option: --chian (did you mean --chain?)" in res.stderr


@pytest.mark.parametrize("sandboxed", [(), ("--sandbox",)])
def test_dsl_agent_not_found_suggests_a_defined_one(
    project: Path, sandboxed: tuple[str, ...]
) -> None:
    init_repo(project)
    write_config(project, {"agents": {"fk:builder": {"path": "fake"}}})
    res = fks("run", "fk:bulider:2", *sandboxed, cwd=project)
    assert res.code == 2, res.output
    assert res.stderr == (
        "fks: Agent 'fk:bulider' is not defined under 'agents' and not on PATH "
        "(did you mean 'fk:builder'?)\n"
    )
    assert calls(project.parent) == [] and not (project / ".forge" / "runs").exists()


@pytest.mark.parametrize("sandboxed", [(), ("--sandbox",)])
@pytest.mark.parametrize("suffix", ["abc", "", "three"])
def test_a_suffix_that_is_no_count_after_a_defined_agent_is_named(
    project: Path, sandboxed: tuple[str, ...], suffix: str
) -> None:
    init_repo(project)
    write_config(project, {"agents": {"fk:builder": {"path": "fake"}}})
    res = fks("run", f"fk:builder:{suffix}", *sandboxed, cwd=project)
    assert res.code == 2, res.output
    assert res.stderr == (
        f"fks: step 'fk:builder:{suffix}': '{suffix}' is not an iteration count (ASCII digits, "
        "e.g. 'fk:builder:3'); did you mean 'fk:builder:N'?\n"
    )
    assert calls(project.parent) == [] and not (project / ".forge" / "runs").exists()
