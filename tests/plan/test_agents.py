from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_runner.errors import AgentNotFoundError
from sandbox_runner.plan.agents import resolve_agent
from sandbox_runner.plan.claude_agents import parse_claude_agent_path
from sandbox_runner.plan.config import AgentConfig


def make_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("ref", "project", "name"),
    [
        ("/home/u/proj/.claude/agents/reviewer", "/home/u/proj", "reviewer"),
        ("/home/u/proj/.claude/agents/reviewer.md", "/home/u/proj", "reviewer"),
        ("/a/.claude/agents/b/.claude/agents/name", "/a/.claude/agents/b", "name"),
        ("../other/.claude/agents/analyzer", "/base/other", "analyzer"),
        (".claude/agents/local", "/base/sub", "local"),
    ],
)
def test_claude_agent_paths(ref: str, project: str, name: str) -> None:
    parsed = parse_claude_agent_path(ref, Path("/base/sub"))
    assert parsed is not None
    assert parsed.project == Path(project)
    assert parsed.name == name


@pytest.mark.parametrize(
    "ref", ["builder", "./bin/agent", "/usr/bin/x", "/p/.claude/agents/", "/p/.claude/agents/a/b"]
)
def test_not_claude_agent_paths(ref: str) -> None:
    assert parse_claude_agent_path(ref, Path("/base")) is None


def test_name_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = make_exe(tmp_path / "bin" / "my-agent")
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}/usr/bin:/bin")
    cmd = resolve_agent("my-agent", agents={}, cwd=tmp_path)
    assert cmd.kind == "binary"
    assert cmd.argv(["--x"], "do it") == [str(exe), "--x", "do it"]
    assert cmd.argv([], None) == [str(exe)]


def test_missing_name_says_so(tmp_path: Path) -> None:
    with pytest.raises(AgentNotFoundError, match="Agent 'nope-agent' not found on PATH"):
        resolve_agent("nope-agent", agents={}, cwd=tmp_path)


def test_relative_path_to_cwd(tmp_path: Path) -> None:
    exe = make_exe(tmp_path / "scripts" / "agent.sh")
    cmd = resolve_agent("./scripts/agent.sh", agents={}, cwd=tmp_path)
    assert cmd.program == str(exe)
    assert cmd.cwd == tmp_path


def test_path_problems(tmp_path: Path) -> None:
    with pytest.raises(AgentNotFoundError, match="does not exist"):
        resolve_agent("./missing.sh", agents={}, cwd=tmp_path)
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(AgentNotFoundError, match="not an executable"):
        resolve_agent("./plain.txt", agents={}, cwd=tmp_path)


def test_config_path_overrides_name(tmp_path: Path) -> None:
    exe = make_exe(tmp_path / "tools" / "real")
    cmd = resolve_agent(
        "nice-name", agents={"nice-name": AgentConfig(path="tools/real")}, cwd=tmp_path
    )
    assert cmd.program == str(exe)
    assert cmd.name == "nice-name"


def test_external_claude_agent_uses_frontmatter_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_exe(tmp_path / "bin" / "claude")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin:/bin")
    other = tmp_path / "other"
    agent_file = other / ".claude" / "agents" / "rev.md"
    agent_file.parent.mkdir(parents=True)
    agent_file.write_text("---\nname: code-reviewer\ndescription: x\n---\nReview things.\n")
    here = tmp_path / "here"
    here.mkdir()
    cmd = resolve_agent("../other/.claude/agents/rev", agents={}, cwd=here)
    assert cmd.kind == "claude-agent"
    assert cmd.cwd == other
    argv = cmd.argv(["--extra"], "Review the changes")
    assert argv[:3] == [str(tmp_path / "bin" / "claude"), "--agent", "code-reviewer"]
    assert argv[argv.index("-p") + 1] == "Review the changes"
    assert "stream-json" in argv and "--verbose" in argv
    assert argv[-1] == "--extra"


def test_external_without_md_file_uses_path_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_exe(tmp_path / "bin" / "claude")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "other").mkdir()
    cmd = resolve_agent(str(tmp_path / "other/.claude/agents/plain"), agents={}, cwd=tmp_path)
    assert cmd.claude_agent == "plain"


def test_external_missing_project(tmp_path: Path) -> None:
    with pytest.raises(AgentNotFoundError, match=r"project directory .*gone does not exist"):
        resolve_agent(str(tmp_path / "gone/.claude/agents/x"), agents={}, cwd=tmp_path)


def test_sandbox_resolution(tmp_path: Path) -> None:
    cmd = resolve_agent("only-in-image", agents={}, cwd=tmp_path, on_host=False)
    assert cmd.program == "only-in-image"
    outside = make_exe(tmp_path.parent / f"{tmp_path.name}-outside" / "agent")
    with pytest.raises(AgentNotFoundError, match="'mounts' option"):
        resolve_agent(str(outside), agents={}, cwd=tmp_path, on_host=False)
    cmd = resolve_agent(
        str(outside), agents={}, cwd=tmp_path, on_host=False, visible=[outside.parent]
    )
    assert cmd.program == str(outside)


def test_a_claude_agents_path_names_its_claude(tmp_path: Path) -> None:
    """`cli: claude` with `path`: that executable is claude, on the host and in a container;
    a system prompt alone keeps the claude on PATH (its `path` is not claude's)."""
    own = make_exe(tmp_path / "tools" / "claude-2")
    cfg = AgentConfig.model_validate({"cli": "claude", "path": "tools/claude-2"})
    cmd = resolve_agent("w", agents={"w": cfg}, cwd=tmp_path)
    assert (cmd.kind, cmd.program) == ("claude", str(own))
    cmd = resolve_agent("w", agents={"w": cfg}, cwd=tmp_path, on_host=False)
    assert (cmd.kind, cmd.program) == ("claude", "tools/claude-2")
    prompted = AgentConfig.model_validate({"systemPromptText": "Be brief.", "path": "x.sh"})
    cmd = resolve_agent("p", agents={"p": prompted}, cwd=tmp_path, on_host=False)
    assert (cmd.kind, cmd.program) == ("claude", "claude")
