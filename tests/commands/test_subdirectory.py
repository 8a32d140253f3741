"""fks run from a subdirectory of a set-up repository finds forge/chains.json above it, as git
finds `.git`; `fks init` in a subdirectory sets up at the repository's top."""

from __future__ import annotations

import json
from pathlib import Path

from fks_testing.helpers import calls, fks, init_repo, write_config


def _repo_with_chain(project: Path) -> Path:
    init_repo(project)
    (project / "prompts").mkdir()
    (project / "prompts" / "go.md").write_text("go from the file")
    write_config(
        project,
        {
            "agents": {"worker": {"path": "fake"}},
            "chains": {
                "c": {
                    "description": "one step",
                    "promptFile": "prompts/go.md",
                    "steps": [{"agent": "worker"}],
                }
            },
        },
    )
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    return sub


def test_every_command_finds_the_config_from_a_subdirectory(project: Path) -> None:
    sub = _repo_with_chain(project)
    res = fks("chains", cwd=sub)
    assert res.code == 0, res.output
    assert "c  one step" in res.stdout
    res = fks("validate", cwd=sub)
    assert res.code == 0, res.output
    assert f"{project}/forge/chains.json: OK" in res.stdout
    res = fks("run", "--chain", "c", cwd=sub)
    assert res.code == 0, res.output
    [call] = calls(project.parent)
    assert call["prompt"] == "go from the file"
    assert call["cwd"] == str(project)
    assert len(list((project / ".forge" / "runs").iterdir())) == 1
    assert not (sub / "forge").exists() and not (sub / ".forge").exists()


def test_the_nearest_config_wins(project: Path) -> None:
    sub = _repo_with_chain(project)
    write_config(sub, {"chains": {"inner": {"steps": [{"agent": "fake"}]}}})
    res = fks("chains", cwd=sub / "forge")
    assert res.code == 0, res.output
    assert "inner" in res.stdout and "one step" not in res.stdout


def test_init_in_a_subdirectory_sets_up_at_the_top(project: Path) -> None:
    init_repo(project)
    sub = project / "src"
    sub.mkdir()
    res = fks("init", cwd=sub)
    assert res.code == 0, res.output
    assert f"Setting up at the top of the repository, {project}" in res.stdout
    assert json.loads((project / "forge" / "chains.json").read_text())["chains"]
    assert not (sub / "forge").exists() and not (sub / "ralph").exists()
    res = fks("chains", cwd=sub)
    assert res.code == 0 and "ralph" in res.stdout, res.output
