"""`fks init` as a user runs it: files written or kept, and the config it writes works."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fks_testing.helpers import fks, init_repo

from sandbox_runner.commands.init import FILES, template
from sandbox_runner.errors import UsageError
from sandbox_runner.plan.config import load_config

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "sandbox_runner" / "templates" / "init"


def contents(project: Path) -> dict[str, bytes]:
    return {rel: (project / rel).read_bytes() for rel in FILES}


@pytest.fixture
def claude_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dummy `claude` executable first on PATH (a dry run only resolves it)."""
    bin_dir = tmp_path / "claude-bin"
    bin_dir.mkdir()
    exe = bin_dir / "claude"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return exe


def test_init_creates_every_file_from_the_templates(project: Path, cli) -> None:
    res = cli("init")
    assert res.code == 0, res.output
    assert res.stdout.splitlines()[: len(FILES)] == [f"created {rel}" for rel in FILES]
    for rel in FILES:
        assert (project / rel).read_bytes() == template(rel).read_bytes(), rel
    assert "fks run --chain ralph --sandbox" in res.stdout
    assert "without Docker: fks run --chain ralph" in res.stdout
    assert "ralph/PLAN.md" in res.stdout.split("Next steps:")[1]


def test_second_run_keeps_everything(project: Path, cli) -> None:
    assert cli("init").code == 0
    for rel in FILES:  # the user edits every file; a second init must not undo that
        with (project / rel).open("a") as f:
            f.write("\n" if rel.endswith(".json") else "\nmine\n")
    before = contents(project)
    res = cli("init")
    assert res.code == 0, res.output
    assert res.stdout.splitlines()[: len(FILES)] == [f"kept {rel} (exists)" for rel in FILES]
    assert "created" not in res.stdout
    assert "lacks" not in res.stdout  # its own config has all the fk agents and chains
    assert contents(project) == before


def test_existing_plan_is_not_overwritten(project: Path, cli) -> None:
    (project / "ralph").mkdir()
    (project / "ralph" / "PLAN.md").write_text("# My plan\n")
    res = cli("init")
    assert res.code == 0, res.output
    assert "kept ralph/PLAN.md (exists)" in res.stdout
    assert "created ralph/SPECS.md" in res.stdout
    assert (project / "ralph" / "PLAN.md").read_text() == "# My plan\n"


def test_existing_config_is_kept_and_its_gaps_named(project: Path, cli) -> None:
    config = project / "forge" / "chains.json"
    config.parent.mkdir()
    mine = {
        "agents": {"fk:planner": {"path": "planner"}, "other": {"path": "builder"}},
        "chains": {"ralph": {"steps": [{"agent": "fk:planner"}]}},
    }
    config.write_text(json.dumps(mine))
    res = cli("init")
    assert res.code == 0, res.output
    assert "kept forge/chains.json (exists)" in res.stdout
    assert json.loads(config.read_text()) == mine
    gaps = next(line for line in res.stdout.splitlines() if "lacks" in line)
    assert "fk:builder, fk:reviewer" in gaps
    assert "plan, build, review" in gaps
    assert "fk:planner" not in gaps and "ralph" not in gaps


def test_unreadable_existing_config_is_kept(project: Path, cli) -> None:
    config = project / "forge" / "chains.json"
    config.parent.mkdir()
    config.write_text("{ not json")
    res = cli("init")
    assert res.code == 0, res.output
    assert "cannot be read as JSON" in res.stdout
    assert config.read_text() == "{ not json"


def test_generated_config_loads(project: Path, cli) -> None:
    assert cli("init").code == 0
    cfg = load_config(project / "forge" / "chains.json", cwd=project, required=True)
    assert cfg is not None
    assert set(cfg.agents) == {"fk:planner", "fk:builder", "fk:reviewer"}
    for name, agent in cfg.agents.items():
        assert agent.is_claude and agent.max_turns and agent.model, name
        assert agent.default_prompt, f"{name}: claude -p needs a prompt"
        assert agent.system_prompt == f"system-prompts/fk/{name.removeprefix('fk:')}.md"
    planner = cfg.agents["fk:planner"]
    assert planner.allowed_tools == ("Read", "Grep", "Glob", "Bash")
    assert planner.disallowed_tools is not None and "Edit" in planner.disallowed_tools
    steps = {
        name: [(s.agent, s.iterations) for s in chain.steps] for name, chain in cfg.chains.items()
    }
    assert steps == {
        "ralph": [("fk:planner", 3), ("fk:builder", 20)],
        "plan": [("fk:planner", 5)],
        "build": [("fk:builder", 30)],
        "review": [("fk:reviewer", None)],
    }


def test_validate_and_chains_pass_in_a_fresh_project(tmp_path: Path) -> None:
    proj = init_repo(tmp_path / "app")
    res = fks("init", cwd=proj)
    assert res.code == 0, res.output
    assert "not a git repository" not in res.stdout
    res = fks("validate", cwd=proj)
    assert res.code == 0, res.output
    assert "OK (3 agents, 4 chains)" in res.stdout
    res = fks("chains", cwd=proj)
    assert res.code == 0, res.output
    listed = [line.split()[0] for line in res.stdout.splitlines() if line and not line[0].isspace()]
    assert listed == ["ralph", "plan", "build", "review"]
    assert "fk:planner:3 -> fk:builder:20" in res.stdout


def test_outside_git_says_to_git_init(tmp_path: Path) -> None:
    res = fks("init", "--cwd", str(tmp_path))
    assert res.code == 0, res.output
    assert "is not a git repository: run 'git init' first" in res.stdout


def test_dry_run_of_ralph_spawns_claude_with_the_fk_prompts(
    project: Path, cli, claude_on_path: Path
) -> None:
    assert cli("init").code == 0
    res = cli("run", "--chain", "ralph", "--dry-run")
    assert res.code == 0, res.output
    assert f"{claude_on_path} -p " in res.stdout
    assert "--append-system-prompt" in res.stdout and "--max-turns 50" in res.stdout

    res = cli("run", "--chain", "ralph", "--dry-run", "--json")
    assert res.code == 0, res.output
    planner, builder = json.loads(res.stdout)["steps"]
    for step, name, turns in ((planner, "planner", "50"), (builder, "builder", "100")):
        argv = step["argv"]
        assert argv[:2] == [str(claude_on_path), "-p"]
        assert argv[2], "the agent's defaultPrompt is passed to -p"
        system = argv[argv.index("--append-system-prompt") + 1]
        own = (project / "system-prompts" / "fk" / f"{name}.md").read_text()
        assert system.endswith(own)
        assert argv[argv.index("--max-turns") + 1] == turns
    assert "--allowedTools" in planner["argv"] and "--allowedTools" not in builder["argv"]


def test_dry_run_as_a_subprocess(tmp_path: Path, claude_on_path: Path) -> None:
    proj = init_repo(tmp_path / "app")
    assert fks("init", cwd=proj).code == 0
    res = fks("run", "--chain", "ralph", "--dry-run", cwd=proj)
    assert res.code == 0, res.output
    assert "Step 1: fk:planner (max 3 iterations)" in res.stdout
    assert "Step 2: fk:builder (max 20 iterations)" in res.stdout
    assert res.stdout.count(f"{claude_on_path} -p ") == 2


def test_cwd_must_be_a_directory(tmp_path: Path, cli) -> None:
    not_dir = tmp_path / "file"
    not_dir.write_text("")
    res = cli("init", "--cwd", str(not_dir))
    assert res.code == 2
    assert "not a directory" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    from sandbox_runner.commands import init

    with pytest.raises(UsageError):
        init.run(cwd=tmp_path / "missing")


def test_a_file_in_the_way_is_an_error(project: Path, cli) -> None:
    (project / "ralph").write_text("not a directory")
    res = cli("init")
    assert res.code == 2
    assert "cannot create ralph/PLAN.md" in res.stderr


def test_every_template_is_installed() -> None:
    on_disk = sorted(
        p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*") if p.is_file()
    )
    assert on_disk == sorted(FILES)


@pytest.mark.parametrize("link", ["forge", "system-prompts", "forge/chains.schema.json"])
def test_init_never_writes_through_a_link(project: Path, tmp_path: Path, link: str) -> None:
    """A step may have landed `forge` as a link to a host folder: `fks init` refuses in one line
    instead of writing its files there (a link in a file's place is replaced, not followed)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / link).parent.mkdir(parents=True, exist_ok=True)
    (project / link).symlink_to(outside / "schema.json" if link.endswith(".json") else outside)
    done = fks("init", cwd=project)
    if link.endswith(".json"):
        assert done.code == 0, done.output
        assert not (project / link).is_symlink()
    else:
        assert done.code == 2, done.output
        assert f"{project / link} is a symlink" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert list(outside.iterdir()) == []
