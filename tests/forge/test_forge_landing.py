"""Landing a forge task goes the way a run's step lands: a merge blocked by the user's own files
names them and says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.fakes import FakeRun
from fks_testing.forge import ANALYSIS, APPROVED, answer, commit, context, new_task
from fks_testing.helpers import git

from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.forge.worker import process_task

# The stages resolve the claude CLI on PATH, even on the fake sandbox.
pytestmark = pytest.mark.claude


def test_a_landing_blocked_by_untracked_files_names_them(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "pages", capsys)
    (repo / "x.md").write_text("mine\n")
    ctx, _ = context(repo, [answer(ANALYSIS), commit({"x.md": "agent\n"}), answer(APPROVED)])
    before = git(repo, "rev-parse", "main")
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert (item.error or "").startswith(
        "could not land: it would overwrite your untracked file x.md; commit, stash or move it;"
    ), item.error
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "x.md").read_text() == "mine\n"


def test_hostile_file_names_in_a_blocked_landing_are_quoted(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent chose the names git lists: escapes and bidi controls come out escaped."""
    task_id = new_task(repo, "evil", capsys)
    name = "evil\x1b[2J\u202egpj.md"
    (repo / name).write_text("mine\n")
    ctx, _ = context(repo, [answer(ANALYSIS), commit({name: "agent\n"}), answer(APPROVED)])
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    error = item.error or ""
    assert error.startswith("could not land: it would overwrite your untracked file ")
    assert "\x1b" not in error and "\u202e" not in error
    assert '"evil\\x1b[2J\\u202egpj.md"' in error


def test_a_task_never_lands_over_ignored_files_nor_changes_a_secret_file(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Forge lands through the same checks as a run's step: the user's ignored `.env` the task
    force-adds, and the committed CA `caCerts` names, which it changes, stop the landing."""
    (repo / ".gitignore").write_text(".env\n")
    (repo / "ca.pem").write_text("the user's CA\n")
    git(repo, "add", ".gitignore", "ca.pem")
    git(repo, "commit", "-qm", "ignore .env; the CA")
    task_id = new_task(repo, "credentials", capsys)
    (repo / ".env").write_text("mine\n")

    def implement(spec: ExecSpec) -> FakeRun:
        (spec.cwd / ".env").write_text("agent\n")
        (spec.cwd / "ca.pem").write_text("the agent's CA\n")
        git(spec.cwd, "add", "-f", ".env", "ca.pem")
        git(spec.cwd, "commit", "-qm", "credentials")
        return answer(None)

    ctx, _ = context(repo, [answer(ANALYSIS), implement, answer(APPROVED)])
    ctx.secret_files = ("ca.pem",)
    before = git(repo, "rev-parse", "main")
    item = process_task(ctx, task_id, max_cost=None)
    assert item is not None and item.status == "failed"
    assert (item.error or "").startswith(
        "could not land: it changes ca.pem, which sandbox.secrets or sandbox.caCerts read (the "
        "next run would send what the branch put there), and would overwrite your untracked "
        "file .env; review the branch, move that file away and merge it by hand only if that "
        "is meant;"
    ), item.error
    assert git(repo, "rev-parse", "main") == before
    assert (repo / ".env").read_text() == "mine\n"
    assert (repo / "ca.pem").read_text() == "the user's CA\n"
