"""The forge pipeline on the fake sandbox: structured answers of the claude CLI, Implement runs
that commit, tasks on the board and the stages' context."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fks_testing.fakes import FakeRun, FakeSandbox
from fks_testing.helpers import git
from sandbox_runner.backends.api import ExecSpec
from sandbox_runner.console.output import PlainReporter
from sandbox_runner.forge.stages import ForgeContext
from sandbox_runner.git.repo import open_repo
from sandbox_runner.plan.forge_settings import ForgeSettings
from sandbox_runner.tasks.commands import create

ANALYSIS = {
    "complexity": "low",
    "plan": "Write the file.",
    "relevant_files": ["a.txt"],
    "implementation_steps": ["write a.txt", "commit"],
    "context": "none",
    "sufficient": True,
}
APPROVED = {"approved": True, "issues": [], "suggestions": []}
REJECTED = {"approved": False, "issues": ["a.txt must say 'two'"], "suggestions": []}


def answer(obj: Any, cost: float = 0.01) -> FakeRun:
    """A claude run whose result carries `obj` as its structured output."""
    events = [
        {"type": "system", "subtype": "init", "session_id": "s", "model": "m"},
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 1,
            "total_cost_usd": cost,
            "result": json.dumps(obj),
            "structured_output": obj,
            "session_id": "s",
        },
    ]
    return FakeRun(stdout="".join(json.dumps(e) + "\n" for e in events))


def commit(files: dict[str, str], cost: float = 0.02) -> Callable[[ExecSpec], FakeRun]:
    """An Implement run that writes `files` in its worktree and commits them."""

    def run(spec: ExecSpec) -> FakeRun:
        for name, text in files.items():
            (spec.cwd / name).write_text(text)
        git(spec.cwd, "add", "-A")
        git(spec.cwd, "commit", "-qm", f"implement {', '.join(files)}")
        return answer(None, cost)

    return run


def new_task(repo: Path, title: str, capsys: pytest.CaptureFixture[str]) -> str:
    create(root=repo, title=title, description=f"Do {title}")
    task_id = capsys.readouterr().out.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"task {task_id}")
    return task_id


def context(repo: Path, script: list[Any], **settings: Any) -> tuple[ForgeContext, FakeSandbox]:
    sandbox = FakeSandbox(script)
    ctx = ForgeContext(
        repo=open_repo(repo, what="test"),
        base="main",
        settings=ForgeSettings(**settings),
        reporter=PlainReporter(),
        session="session-1",
        local_sandbox=sandbox,
    )
    return ctx, sandbox
