"""The agent CLIs an agent image carries (`fks image build --with`, `sandbox.imageWith`): which
names are taken, the Dockerfile stages and copies of the chosen ones only, the label that
records them, and the refusal, before anything starts, of a step whose CLI its image lacks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner.backends.docker.preflight import check_clis
from sandbox_runner.errors import SandboxError, UsageError
from sandbox_runner.images import build
from sandbox_runner.images.clis import clis_in, parse_clis, with_clis
from sandbox_runner.images.versions import AGENT_CLI_PACKAGES
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.config import AgentConfig


def test_with_takes_names_and_lists_in_the_images_order() -> None:
    assert parse_clis(["opencode,codex", " Gemini ", "claude", ""]) == (
        "codex",
        "gemini",
        "opencode",
    )
    with pytest.raises(
        UsageError, match=r"--with: 'codx' is not an agent CLI .*did you mean 'codex'"
    ):
        parse_clis(["codx"])


def test_only_the_chosen_clis_are_built_and_copied_node_only_where_needed() -> None:
    dockerfile = build.dockerfile_source(build.DOCKERFILE_NAME).read_text()
    assert with_clis(dockerfile, ()) == dockerfile
    text = with_clis(dockerfile, ["opencode"])
    assert AGENT_CLI_PACKAGES["opencode"] in text and AGENT_CLI_PACKAGES["codex"] not in text
    assert "COPY --from=cli-opencode /out/ /" in text
    assert "COPY --from=node " not in text  # OpenCode is a native binary
    both = with_clis(dockerfile, ["codex", "gemini"])
    assert both.count("COPY --from=node /node/ /") == 1
    # The CLIs come after Claude Code and before fks, whose source changes most often.
    final = both[both.index("FROM scratch") :]
    order = ["--from=claude", "--from=cli-codex", "--from=cli-gemini", "--from=fks"]
    assert [final.index(mark) for mark in order] == sorted(final.index(m) for m in order)


def test_the_label_says_which_clis_an_image_holds() -> None:
    assert clis_in({"fks.agent-clis": "codex,opencode"}) == {"codex", "opencode"}
    assert clis_in({"org.opencontainers.image.title": "fks-agent"}) == frozenset()
    assert clis_in({}) is None  # not fks's image: its PATH tells


def _step(cli: str, name: str = "coder") -> AgentCommand:
    return AgentCommand(
        name=name, kind="cli", program=cli, cwd=Path("/w"), config=AgentConfig(cli=cli)
    )


def _client(labels: dict[str, str]) -> Any:
    return SimpleNamespace(images=SimpleNamespace(get=lambda _name: SimpleNamespace(labels=labels)))


def test_a_step_whose_cli_its_image_lacks_is_refused_naming_the_build() -> None:
    client = _client({"fks.agent-clis": "opencode"})
    check_clis(client, [("fks-agent:latest", _step("opencode"))])
    with pytest.raises(SandboxError) as refused:
        check_clis(client, [("fks-agent:latest", _step("codex"))])
    assert str(refused.value) == (
        "step 'coder' runs Codex, which image fks-agent:latest does not hold; put it in with "
        "'fks image build --with codex,opencode'"
    )
    with pytest.raises(SandboxError, match="'fks image build --tag mine:1 --with gemini'"):
        check_clis(_client({"fks.agent-clis": ""}), [("mine:1", _step("gemini"))])
    check_clis(_client({}), [("someone-elses:1", _step("codex"))])  # its PATH is asked


def test_image_with_in_the_config_is_checked_and_unknown_with_is_a_usage_error(
    tmp_path: Path,
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hi\n"})
    write_config(repo, {"sandbox": {"imageWith": ["codex", "gemni"]}})
    git(repo, "add", "-A")
    done = fks("validate", cwd=repo, timeout=60)
    assert done.code == 2 and "did you mean 'gemini'" in done.output, done.output
    done = fks("image", "build", "--with", "codex,claud-code", cwd=repo, timeout=60)
    assert done.code == 2, done.output
    assert "--with: 'claud-code' is not an agent CLI fks installs" in done.stderr
    done = fks("image", "build", "--from", "x:1", "--with", "codex", cwd=tmp_path, timeout=60)
    assert done.code == 2 and "--from images carry Claude Code only" in done.stderr, done.output
