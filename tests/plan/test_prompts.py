from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_runner.errors import ConfigError, UsageError
from sandbox_runner.plan.prompts import resolve_prompt


def levels(
    step: tuple[str | None, str | None] = (None, None),
    chain: tuple[str | None, str | None] = (None, None),
    agent: tuple[str | None, str | None] = (None, None),
) -> list[tuple[str, str | None, str | None]]:
    return [("step", *step), ("chain", *chain), ("agent default", *agent)]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name in ("cli.md", "step.md", "chain.md", "agent.md"):
        (tmp_path / name).write_text(f"from {name}")
    (tmp_path / "empty.md").write_text("")
    return tmp_path


def read(cwd: Path, **kw: object) -> str | None:
    return resolve_prompt(cwd=cwd, **kw).read()  # type: ignore[arg-type]


def test_priority_order(files: Path) -> None:
    all_levels = levels(("step", None), ("chain", None), ("agent", None))
    assert read(files, cli_prompt="cli", cli_prompt_file=None, levels=all_levels) == "cli"
    assert (
        read(files, cli_prompt=None, cli_prompt_file=Path("cli.md"), levels=all_levels)
        == "from cli.md"
    )
    assert read(files, cli_prompt=None, cli_prompt_file=None, levels=all_levels) == "step"
    assert (
        read(
            files,
            cli_prompt=None,
            cli_prompt_file=None,
            levels=levels(chain=("chain", None), agent=("agent", None)),
        )
        == "chain"
    )
    assert (
        read(files, cli_prompt=None, cli_prompt_file=None, levels=levels(agent=(None, "agent.md")))
        == "from agent.md"
    )
    assert read(files, cli_prompt=None, cli_prompt_file=None, levels=levels()) is None


def test_inline_beats_file_at_same_level(files: Path) -> None:
    assert (
        read(
            files, cli_prompt=None, cli_prompt_file=None, levels=levels(step=("inline", "step.md"))
        )
        == "inline"
    )
    assert (
        read(
            files,
            cli_prompt=None,
            cli_prompt_file=None,
            levels=levels(step=(None, "step.md"), chain=("chain", None)),
        )
        == "from step.md"
    )


def test_empty_string_means_no_prompt(files: Path) -> None:
    assert (
        read(files, cli_prompt="", cli_prompt_file=None, levels=levels(chain=("chain", None)))
        == "chain"
    )
    assert (
        read(
            files,
            cli_prompt=None,
            cli_prompt_file=None,
            levels=levels(step=(None, "empty.md"), chain=("chain", None)),
        )
        is None
    )


def test_files_are_reread_every_time(files: Path) -> None:
    source = resolve_prompt(
        cwd=files, cli_prompt=None, cli_prompt_file=None, levels=levels(step=(None, "step.md"))
    )
    assert source.read() == "from step.md"
    (files / "step.md").write_text("edited mid-run")
    assert source.read() == "edited mid-run"


def test_missing_file_and_both_cli_options(files: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.md"):
        resolve_prompt(cwd=files, cli_prompt=None, cli_prompt_file=Path("nope.md"), levels=levels())
    with pytest.raises(UsageError, match="either --prompt or --prompt-file"):
        resolve_prompt(cwd=files, cli_prompt="x", cli_prompt_file=Path("cli.md"), levels=levels())
