"""What an iteration of an agent CLI starts where it runs apart from this machine (a container):
its settings files travel with the spec, under the sandbox's home, and its command is built
from the sandbox's environment alone, never this machine's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_runner.backends.docker.workspace.export import files_env
from sandbox_runner.errors import SandboxError
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.steps.launch import Asked, iteration_spec

HOME = Path("/home/fks/.fks-cli")


def _agent(cli: str) -> AgentCommand:
    return AgentCommand(
        name="w", kind="cli", program=cli, cwd=Path("/workspace"), config=AgentConfig(cli=cli)
    )


def test_a_sandboxed_cli_gets_its_files_with_the_spec_and_only_the_sandboxs_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/host-only")
    inside = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8081", "HTTPS_PROXY": "http://127.0.0.1:3128"}
    asked = Asked(args=(), prompt="Go.", env=inside, timeout=None, labels={})
    spec = iteration_spec(_agent("opencode"), asked, None, HOME, carried=True)
    config = json.loads(spec.env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["anthropic"]["options"]["baseURL"] == "http://127.0.0.1:8081/v1"
    assert set(spec.files) == {str(HOME / "instructions.md")}
    assert "FORKHESTRA_COMPLETE" in spec.files[str(HOME / "instructions.md")]
    assert spec.env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    gemini = iteration_spec(_agent("gemini"), asked, None, HOME, carried=True)
    assert gemini.env["GEMINI_CLI_HOME"] == str(HOME)
    assert set(gemini.files) == {
        str(HOME / ".gemini/settings.json"),
        str(HOME / ".gemini/GEMINI.md"),
    }
    assert not HOME.exists()  # nothing written here


def test_the_files_reach_the_container_as_variables_of_paths_fks_made() -> None:
    env = files_env({"/home/fks/.fks-cli/a.json": "{}", "/home/fks/.fks-cli/.g/b.md": "x\n"})
    assert env == {
        "FKS_CLI_FILES": "/home/fks/.fks-cli/a.json /home/fks/.fks-cli/.g/b.md",
        "FKS_CLI_FILE_0": "{}",
        "FKS_CLI_FILE_1": "x\n",
    }
    for bad in ("/home/fks/../etc/x", "relative", "/a b", "/a;b"):
        with pytest.raises(SandboxError):
            files_env({bad: ""})
