"""How a Claude agent's argv is built: every config field, external `.claude/agents/<name>`
agents, and what `fks run --dry-run` shows. One test runs the host `claude` CLI with a built
argv against the fake Messages API, to prove the CLI accepts it as meant.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner.errors import ConfigError
from sandbox_runner.plan.agents import DEFAULT_MAX_TURNS, resolve_agent
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.prompts import MARKER, MODE_AWARENESS

# Flags the claude CLI parses as variadic: a value after them that is not a flag is theirs.
VARIADIC = ("--allowedTools", "--disallowedTools", "--mcp-config", "--add-dir")


def agent(**fields: object) -> AgentConfig:
    return AgentConfig.model_validate(fields)


def argv_of(
    tmp_path: Path,
    cfg: AgentConfig,
    prompt: str | None = "Do the task.",
    args: tuple[str, ...] = (),
) -> list[str]:
    cmd = resolve_agent("a", agents={"a": cfg}, cwd=tmp_path, on_host=False)
    assert cmd.kind == "claude"
    return cmd.argv(args, prompt)


def value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} should appear once in {argv}"
    return argv[argv.index(flag) + 1]


def test_base_shape(tmp_path: Path) -> None:
    argv = argv_of(tmp_path, agent(systemPromptText="Be brief."))
    assert argv[:3] == ["claude", "-p", "Do the task."]
    assert value(argv, "--output-format") == "stream-json"
    assert "--verbose" in argv  # stream-json in print mode needs it
    assert "--dangerously-skip-permissions" in argv
    assert value(argv, "--max-turns") == str(DEFAULT_MAX_TURNS) == "100"
    for absent in (
        "--model",
        "--mcp-config",
        "--settings",
        "--allowedTools",
        "--disallowedTools",
        "--agent",
    ):
        assert absent not in argv


def test_system_prompt_file_is_reread_on_every_call_after_mode_awareness(tmp_path: Path) -> None:
    prompt_file = tmp_path / "prompts" / "sys.md"
    prompt_file.parent.mkdir()
    prompt_file.write_text("# Role one\nYou build things.\n")
    cmd = resolve_agent(
        "a", agents={"a": agent(systemPrompt="prompts/sys.md")}, cwd=tmp_path, on_host=False
    )
    first = value(cmd.argv((), "go"), "--append-system-prompt")
    assert first.startswith(MODE_AWARENESS), first[:200]
    assert first.endswith("# Role one\nYou build things.\n")
    assert first.index(MARKER) < first.index("# Role one")
    prompt_file.write_text("# Role two\nYou review things.\n")
    second = value(cmd.argv((), "go"), "--append-system-prompt")
    assert second.startswith(MODE_AWARENESS)
    assert second.endswith("# Role two\nYou review things.\n")
    assert "Role one" not in second


def test_system_prompt_text(tmp_path: Path) -> None:
    system = value(
        argv_of(tmp_path, agent(systemPromptText="You are terse.")), "--append-system-prompt"
    )
    assert system.startswith(MODE_AWARENESS)
    assert system.endswith("You are terse.")


def test_model_and_max_turns(tmp_path: Path) -> None:
    argv = argv_of(tmp_path, agent(systemPromptText="x", model="opus", maxTurns=7))
    assert value(argv, "--model") == "opus"
    assert value(argv, "--max-turns") == "7"


def test_mcp_config_and_settings_resolve_against_the_config_root(tmp_path: Path) -> None:
    project = tmp_path / "project"
    cfg = agent(systemPromptText="x", mcpConfig="forge/mcp.json", settings="forge/settings.json")
    argv = resolve_agent("a", agents={"a": cfg}, cwd=project, on_host=False).argv((), "go")
    assert value(argv, "--mcp-config") == str(project / "forge" / "mcp.json")
    assert value(argv, "--settings") == str(project / "forge" / "settings.json")
    # In a sandbox the agent runs in a worktree, but config files stay the project's.
    worktree = tmp_path / "project" / ".forge" / "worktrees" / "run" / "1-a"
    moved = replace(
        resolve_agent("a", agents={"a": cfg}, cwd=worktree, on_host=False), config_root=project
    )
    argv = moved.argv((), "go")
    assert value(argv, "--mcp-config") == str(project / "forge" / "mcp.json")
    assert value(argv, "--settings") == str(project / "forge" / "settings.json")


def test_system_prompt_file_resolves_against_the_config_root(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "prompts").mkdir(parents=True)
    (project / "prompts" / "sys.md").write_text("project prompt")
    worktree = tmp_path / "elsewhere"
    worktree.mkdir()
    cfg = agent(systemPrompt="prompts/sys.md")
    cmd = replace(
        resolve_agent("a", agents={"a": cfg}, cwd=worktree, on_host=False), config_root=project
    )
    assert value(cmd.argv((), "go"), "--append-system-prompt").endswith("project prompt")


def test_tool_lists_are_one_comma_joined_value_each(tmp_path: Path) -> None:
    cfg = agent(
        systemPromptText="x",
        allowedTools=["Read", "Bash(git:*)", "Grep"],
        disallowedTools=["Edit", "Write"],
    )
    argv = argv_of(tmp_path, cfg)
    assert value(argv, "--allowedTools") == "Read,Bash(git:*),Grep"
    assert value(argv, "--disallowedTools") == "Edit,Write"
    for flag in ("--allowedTools", "--disallowedTools"):
        after = argv.index(flag) + 2
        assert after == len(argv) or argv[after].startswith("--"), (
            f"{flag} has more than one value: {argv}"
        )


def test_prompt_right_after_p_and_step_args_last(tmp_path: Path) -> None:
    cfg = agent(
        systemPromptText="x",
        model="sonnet",
        mcpConfig="mcp.json",
        settings="s.json",
        allowedTools=["Read"],
        disallowedTools=["Write"],
    )
    prompt = "Fix the bug.\nThen commit."
    argv = argv_of(
        tmp_path, cfg, prompt=prompt, args=("--add-dir", "/data", "--fallback-model", "haiku")
    )
    assert argv.count(prompt) == 1
    assert argv[argv.index("-p") + 1] == prompt
    assert argv[-4:] == ["--add-dir", "/data", "--fallback-model", "haiku"]
    variadic = [i for i, a in enumerate(argv) if a in VARIADIC]
    assert variadic and argv.index(prompt) < min(variadic), (
        f"a variadic flag comes before the prompt: {argv}"
    )


def test_external_agent_argv_uses_the_frontmatter_name(tmp_path: Path) -> None:
    other = tmp_path / "other"
    agent_file = other / ".claude" / "agents" / "reviewer.md"
    agent_file.parent.mkdir(parents=True)
    agent_file.write_text(
        "---\nname: 'strict-reviewer'\ndescription: reviews\n---\nYou review code.\n"
    )
    here = tmp_path / "here"
    here.mkdir()
    cmd = resolve_agent("../other/.claude/agents/reviewer", agents={}, cwd=here, on_host=False)
    assert (cmd.kind, cmd.cwd, cmd.claude_agent) == ("claude-agent", other, "strict-reviewer")
    argv = cmd.argv(("--model", "haiku"), "Review the last commit.")
    assert argv[:5] == ["claude", "--agent", "strict-reviewer", "-p", "Review the last commit."]
    assert value(argv, "--output-format") == "stream-json"
    assert "--verbose" in argv
    assert argv[-2:] == ["--model", "haiku"]
    # The agent file is the agent's own prompt; fks adds only the mode-awareness text.
    assert value(argv, "--append-system-prompt").strip() == MODE_AWARENESS.strip()
    assert "--max-turns" not in argv  # no config entry: the CLI's own default


def test_external_agent_through_a_config_path(tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / ".claude" / "agents").mkdir(parents=True)
    (other / ".claude" / "agents" / "r.md").write_text("---\nname: rev-bot\n---\nBody\n")
    cfg = AgentConfig.model_validate({"path": str(other / ".claude" / "agents" / "r.md")})
    cmd = resolve_agent("rev", agents={"rev": cfg}, cwd=tmp_path, on_host=False)
    assert cmd.kind == "claude-agent"
    assert cmd.argv((), "go")[1:3] == ["--agent", "rev-bot"]


@pytest.mark.parametrize("kind", ["claude", "claude-agent"])
def test_no_prompt_still_gives_claude_an_input(tmp_path: Path, kind: str) -> None:
    # "No prompt: the agent runs without instruction" (seed 004), and seed 000 runs external
    # agents with no prompt at all. `claude -p ""` exits 1: "Input must be provided either
    # through stdin or as a prompt argument when using --print".
    if kind == "claude":
        cmd = resolve_agent(
            "a",
            agents={"a": agent(systemPromptText="Read ralph/ and work.")},
            cwd=tmp_path,
            on_host=False,
        )
    else:
        (tmp_path / "other" / ".claude" / "agents").mkdir(parents=True)
        cmd = resolve_agent(
            str(tmp_path / "other/.claude/agents/reviewer"), agents={}, cwd=tmp_path, on_host=False
        )
    argv = cmd.argv((), None)
    assert argv[argv.index("-p") + 1].strip(), (
        f"claude gets an empty prompt and refuses to run: {argv[:6]}"
    )


# --- fks run --dry-run, as a user sees it --------------------------------------------------------


@pytest.fixture
def dummy_claude(tmp_path: Path) -> dict[str, str]:
    """A `claude` on PATH that must never run (dry runs only)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "claude"
    exe.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'claude-ran'}\nexit 1\n")
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_dry_run_shows_the_full_argv_with_long_prompts_abbreviated(
    tmp_path: Path, dummy_claude: dict[str, str]
) -> None:
    project = tmp_path / "proj"
    (project / "prompts").mkdir(parents=True)
    (project / "prompts" / "sys.md").write_text("You are the builder.\n" + "Rule.\n" * 100)
    (project / "forge").mkdir()
    (project / "forge" / "mcp.json").write_text('{"mcpServers": {}}')
    long_prompt = "Implement the next task. " * 20
    write_config(
        project,
        {
            "agents": {
                "b": {
                    "systemPrompt": "prompts/sys.md",
                    "model": "sonnet",
                    "maxTurns": 7,
                    "mcpConfig": "forge/mcp.json",
                    "allowedTools": ["Read", "Bash"],
                    "disallowedTools": ["WebFetch"],
                }
            },
            "chains": {
                "c": {
                    "prompt": long_prompt,
                    "steps": [
                        {"agent": "b", "iterations": 3, "args": ["--fallback-model", "haiku"]}
                    ],
                }
            },
        },
    )
    res = fks("run", "--chain", "c", "--dry-run", cwd=project, env=dummy_claude, timeout=60)
    assert res.code == 0, res.output
    command = next(
        (line for line in res.stdout.splitlines() if line.strip().startswith("command:")), None
    )
    assert command is not None, res.stdout
    claude = str(tmp_path / "bin" / "claude")
    assert (
        command.split("command:", 1)[1].strip().startswith(f"{claude} -p 'Implement the next task.")
    ), command
    assert f"…({len(long_prompt)} chars)" in command, command
    system = MODE_AWARENESS + "---\n\n" + (project / "prompts" / "sys.md").read_text()
    assert f"…({len(system)} chars)" in command, command
    for shown in (
        "--output-format stream-json --verbose",
        "--dangerously-skip-permissions",
        "--max-turns 7",
        "--model sonnet",
        f"--mcp-config {project / 'forge' / 'mcp.json'}",
        "--allowedTools Read,Bash",
        "--disallowedTools WebFetch",
    ):
        assert shown in command, f"{shown!r} missing from: {command}"
    assert command.rstrip().endswith("--fallback-model haiku"), command
    assert len(command) < 1200, "long values should be abbreviated"
    assert not (tmp_path / "claude-ran").exists()
    assert not (project / ".forge").exists()

    data = json.loads(
        fks(
            "run", "--chain", "c", "--dry-run", "--json", cwd=project, env=dummy_claude, timeout=60
        ).stdout
    )
    argv = data["steps"][0]["argv"]
    assert argv[:3] == [claude, "-p", long_prompt]
    assert value(argv, "--append-system-prompt") == system
    assert argv[-2:] == ["--fallback-model", "haiku"]


def test_dry_run_global_args_follow_step_args(tmp_path: Path, dummy_claude: dict[str, str]) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    write_config(project, {"agents": {"b": {"systemPromptText": "S"}}})
    res = fks(
        "run",
        "b:2",
        "--prompt",
        "go",
        "--dry-run",
        "--json",
        "--",
        "--model",
        "haiku",
        cwd=project,
        env=dummy_claude,
        timeout=60,
    )
    assert res.code == 0, res.output
    argv = json.loads(res.stdout)["steps"][0]["argv"]
    assert argv[1:3] == ["-p", "go"]
    assert argv[-2:] == ["--model", "haiku"]


def test_dry_run_external_agent(tmp_path: Path, dummy_claude: dict[str, str]) -> None:
    other = init_repo(
        tmp_path / "other", {".claude/agents/reviewer.md": "---\nname: review-bot\n---\nReview.\n"}
    )
    main = init_repo(tmp_path / "main")
    res = fks(
        "run",
        "../other/.claude/agents/reviewer:2",
        "--prompt",
        "Review.",
        "--dry-run",
        "--json",
        cwd=main,
        env=dummy_claude,
        timeout=60,
    )
    assert res.code == 0, res.output
    step = json.loads(res.stdout)["steps"][0]
    assert step["kind"] == "claude-agent"
    assert step["cwd"] == str(other)
    assert step["argv"][1:5] == ["--agent", "review-bot", "-p", "Review."]
    assert git(other, "status", "--porcelain") == ""


# --- the built argv against the real CLI -----------------------------------------------------------

needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="claude CLI not on PATH")


@needs_claude
@pytest.mark.claude
def test_real_cli_accepts_every_config_flag(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "forge").mkdir(parents=True)
    (project / "forge" / "mcp.json").write_text('{"mcpServers": {}}')
    (project / "forge" / "settings.json").write_text("{}")
    (project / "sys.md").write_text("SYSTEM-PROMPT-FROM-FILE-4242")
    cfg = AgentConfig.model_validate(
        {
            "systemPrompt": "sys.md",
            "model": "claude-test-model-9",
            "maxTurns": 3,
            "mcpConfig": "forge/mcp.json",
            "settings": "forge/settings.json",
            "allowedTools": ["Read", "Bash"],
            "disallowedTools": ["WebFetch", "WebSearch"],
        }
    )
    cmd = resolve_agent("a", agents={"a": cfg}, cwd=project)
    prompt = "PROMPT-TEXT-5151: say hi."
    argv = cmd.argv(("--add-dir", str(tmp_path)), prompt)
    with FakeAnthropic([[[{"text": f"hi\n{MARKER}"}]]]) as fake:
        done = subprocess.run(
            argv,
            cwd=project,
            env=isolated_environ(fake.env(tmp_path / "claude-config")),
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )
        mains = fake.main_requests()
    assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert len(mains) == 1, [r.answer for r in fake.requests]
    request = mains[0]
    assert request.prompt == prompt  # not swallowed by a variadic flag
    assert "SYSTEM-PROMPT-FROM-FILE-4242" in request.system_text
    assert "How you are being run" in request.system_text
    assert request.body["model"] == "claude-test-model-9"
    tools = {t.get("name") for t in request.body.get("tools", [])}
    assert not tools & {"WebFetch", "WebSearch"}, tools
    assert '"subtype":"success"' in done.stdout.replace(" ", "")


def test_external_agent_is_defined_by_fks_from_the_file_without_its_hooks(tmp_path: Path) -> None:
    """Claude Code loads no project agents (`--setting-sources user`): fks passes the agent's
    prompt, description, model and tools with `--agents`, never hooks or MCP servers."""
    other = tmp_path / "other"
    (other / ".claude" / "agents").mkdir(parents=True)
    (other / ".claude" / "agents" / "r.md").write_text(
        "---\nname: rev-bot\ndescription: Reviews\nmodel: haiku\ntools: Read, Grep\n"
        "hooks:\n  Stop: [{hooks: [{type: command, command: 'touch /tmp/x'}]}]\n"
        "mcpServers: {evil: {command: sh}}\n---\nYou review code.\n"
    )
    (tmp_path / "here").mkdir()
    cmd = resolve_agent(
        "../other/.claude/agents/r", agents={}, cwd=tmp_path / "here", on_host=False
    )
    argv = cmd.argv((), "go")
    assert value(argv, "--setting-sources") == "user"
    assert json.loads(value(argv, "--agents")) == {
        "rev-bot": {
            "description": "Reviews",
            "prompt": "You review code.",
            "model": "haiku",
            "tools": ["Read", "Grep"],
        }
    }
    (other / ".claude" / "agents" / "r.md").write_text("---\nname: rev-bot\n---\n" + "x" * 70_000)
    with pytest.raises(ConfigError, match="is over 64 KiB"):
        cmd.argv((), "go")


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("tools: " + "[" * 3000 + "]" * 3000, "nested deeper than 100 levels"),
        (
            "a: &a [R, R, R, R, R, R, R, R, R]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
                for p, n in zip("abcdefg", "bcdefgh", strict=True)
            )
            + "tools: *h",
            "over 100000 values",
        ),
    ],
    ids=["nested", "aliases"],
)
def test_an_agent_file_nested_deep_or_full_of_aliases_is_one_config_error(
    tmp_path: Path, header: str, why: str
) -> None:
    """A landed agent file whose front matter would take fks's stack or memory is refused, named."""
    other = tmp_path / "other"
    (other / ".claude" / "agents").mkdir(parents=True)
    (other / ".claude" / "agents" / "r.md").write_text(f"---\n{header}\n---\nYou review code.\n")
    (tmp_path / "here").mkdir()
    cmd = resolve_agent(
        "../other/.claude/agents/r", agents={}, cwd=tmp_path / "here", on_host=False
    )
    with pytest.raises(ConfigError, match=f"r.md: front matter is {why}"):
        cmd.argv((), "go")
