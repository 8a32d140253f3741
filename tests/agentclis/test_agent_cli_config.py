"""An agent's `cli` key as the config and `fks run` see it: an unknown CLI or a Claude-only key
is one line (exit 2), the headless command each adapter builds, and the refusal as root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fks_testing.agentclis import cli_env, cli_project
from fks_testing.helpers import fks, init_repo, one_line_error, write_config


@pytest.mark.parametrize(
    ("agent", "fragment"),
    [
        (
            {"cli": "cursor"},
            "unknown agent CLI 'cursor'; use one of claude, codex, gemini, opencode",
        ),
        ({"cli": "codex", "mcpConfig": "mcp.json"}, "mcpConfig: only for cli 'claude'"),
    ],
)
def test_a_wrong_cli_setting_is_one_line(
    tmp_path: Path, agent: dict[str, object], fragment: str
) -> None:
    repo = init_repo(tmp_path / "repo")
    write_config(repo, {"agents": {"worker": agent}})
    one_line_error(fks("run", "worker", "--prompt", "x", cwd=repo), fragment)


@pytest.mark.agentcli  # the real CLIs on PATH
def test_each_cli_gets_its_headless_command_in_a_dry_run(agent_clis: Path, tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    agents = {
        "c": {"cli": "codex", "model": "gpt-5", "args": ["--oss"]},
        "g": {"cli": "gemini", "model": "gemini-2.5-pro"},
        "o": {"cli": "opencode", "model": "anthropic/claude-sonnet-4-5"},
    }
    write_config(repo, {"agents": agents})
    env = cli_env(agent_clis, tmp_path / "home", {"OPENAI_BASE_URL": "http://gw.example/v1"})
    done = fks("run", "c -> g -> o", "--prompt", "Go.", "--dry-run", "--json", cwd=repo, env=env)
    assert done.code == 0, done.output
    argvs = [step["argv"] for step in json.loads(done.stdout)["steps"]]
    codex, gemini, opencode = argvs
    assert codex[1:4] == ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox"]
    assert any("http://gw.example/v1" in arg for arg in codex), codex
    assert codex[-3:] == ["--oss", "--", "Go."]
    assert gemini[gemini.index("-m") : gemini.index("-m") + 2] == ["-m", "gemini-2.5-pro"]
    assert "--approval-mode=yolo" in gemini
    assert opencode[opencode.index("--model") + 1] == "anthropic/claude-sonnet-4-5"


@pytest.mark.agentcli
@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for root")
def test_a_local_cli_step_as_root_is_refused_before_anything_starts(
    agent_clis: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    repo = cli_project(tmp_path / "repo", "codex")
    env = cli_env(agent_clis, tmp_path / "home", {})
    del env["IS_SANDBOX"]
    done = fks("run", "worker:2", "--prompt", "Go.", cwd=repo, env=env)
    one_line_error(done, "runs codex unattended with full permissions")
    assert not (repo / ".forge" / "runs").exists()


def test_structured_answers_are_asked_as_each_cli_can() -> None:
    from sandbox_runner.agentclis.registry import CLIS

    home = Path("/fks-home")
    claude, codex = CLIS["claude"].structured("{}", home), CLIS["codex"].structured("{}", home)
    assert claude is not None and claude.args == ["--json-schema", "{}"]
    assert codex is not None and codex.args == ["--output-schema", "/fks-home/answer-schema.json"]
    assert codex.files == {"answer-schema.json": "{}"}
    assert CLIS["gemini"].structured("{}", home) is None  # a validated JSON block instead
    assert CLIS["opencode"].structured("{}", home) is None


def test_a_sandboxed_step_of_another_cli_needs_its_key_on_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_runner.backends.docker.preflight import check_credentials
    from sandbox_runner.errors import SandboxError
    from sandbox_runner.plan.agents import resolve_agent
    from sandbox_runner.plan.config import AgentConfig

    agents = {"worker": AgentConfig(cli="gemini")}
    agent = resolve_agent("worker", agents=agents, cwd=tmp_path, on_host=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(SandboxError, match="runs Gemini CLI in a container, which needs its key"):
        check_credentials([agent])
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    check_credentials([agent])
