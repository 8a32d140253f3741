"""`fks forge status|clarifications|create|parent`: the backlog as fks forge left it, a new
task for it, and an interactive Claude that drives `fks forge` for the user."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from sandbox_runner.agentclis.claude import SETTING_SOURCES
from sandbox_runner.commands.forge import _project
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.shown import one_line
from sandbox_runner.console.units import usd
from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.forge.report import item_json
from sandbox_runner.forge.work import WorkStore
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.programs import find_program
from sandbox_runner.tasks.commands import create as create_task
from sandbox_runner.tasks.errors import TaskError


def status(*, cwd: Path | None, json_output: bool = False) -> int:
    project = _project(cwd)
    items = WorkStore(project).items()
    if json_output:
        print(json.dumps([item_json(i) for i in items], indent=2))
        return EXIT_COMPLETE
    if not items:
        print("No task has been through fks forge yet (fks forge run starts the ready ones).")
        return EXIT_COMPLETE
    print(
        f"{'TASK':<16} {'STATUS':<11} {'STAGE':<10} {'ATTEMPTS':>8} {'COST':>9}  "
        "BRANCH / WAITING FOR"
    )
    for i in items:
        waits = one_line(i.waiting_for or i.error or "")
        row = (
            f"{i.task_id:<16} {i.shown_status:<11} {i.stage:<10} {i.attempts:>8} "
            f"{usd(i.cost_usd):>9}  "
            f"{i.branch or '-'}{'  ' + waits if waits else ''}"
        )
        print(strip_escapes(row, keep=""))
    return EXIT_COMPLETE


def clarifications(*, cwd: Path | None) -> int:
    project = _project(cwd)
    store = WorkStore(project)
    open_items = [i for i in store.items() if i.status == WorkStatus.WAITING and not i.answer]
    if not open_items:
        print("No open questions.")
        return EXIT_COMPLETE
    for item in open_items:
        print(strip_escapes(f"{item.task_id}: {item.title}", keep=""))
        for line in (item.question or "").splitlines():
            print(f"  {strip_escapes(line, keep='')}")
        print(
            f'  ({store.clarifications / (item.task_id + ".md")}; answer: fks forge answer {item.task_id} "...")'
        )
    return EXIT_COMPLETE


@dataclass(frozen=True)
class CreateOptions:
    """`fks forge create`'s: the task to add."""

    title: str
    cwd: Path | None = None
    description: str = ""
    criteria: Sequence[str] = ()
    labels: Sequence[str] = ()
    priority: str = "medium"
    depends_on: Sequence[str] = ()
    status: str = "To Do"


def create(options: CreateOptions) -> int:
    """`forge-tasks create` in the project's task database."""
    try:
        return create_task(
            root=_project(options.cwd),
            title=options.title,
            description=options.description,
            criteria=options.criteria,
            labels=options.labels,
            priority=options.priority,
            depends_on=options.depends_on,
            status=options.status,
        )
    except TaskError as exc:
        raise FksError(str(exc)) from None


PARENT_PROMPT = """# You orchestrate fks forge

You talk with the user about the project's tasks and drive `fks forge` for them with Bash:
- `fks forge status`: every task's stage, attempts, cost, branch, and what it waits for.
- `fks forge run [TASK_ID...] [--parallel N] [--sandbox]`: process ready tasks (analyze, implement, review, land).
- `fks forge clarifications`: questions the agents could not answer; ask the user, then
  `fks forge answer TASK_ID "answer"` and run again.
- `fks forge show TASK_ID`: one task's history (stages, attempts, costs, results, commits).
- `fks forge land|retry|reset TASK_ID`: land an approved task once its landing is unblocked; run a
  failed one again from where it stopped; make its next run start from Analyze.
- `fks forge create "title" --description "..."`: add a task; `forge-tasks list` shows them.
- `fks runs`, `fks show RUN`, `fks review RUN`: what each agent did.
"""


PARENT_TOOLS = ",".join(
    f"Bash({command}:*)"
    for command in ("fks forge", "fks runs", "fks show", "fks review", "fks logs", "forge-tasks")
)
"""What the parent may run without asking: the commands above. It reads what agents wrote
(task files, questions, errors, commit subjects), so any other command is asked of the user."""


def parent(*, cwd: Path | None, args: Sequence[str]) -> NoReturn:
    """Replace this process with an interactive `claude` that drives the subcommands above."""
    project = _project(cwd)
    program = find_program("claude", outside=project)
    if program is None:
        raise UsageError(
            "claude is not on PATH; install Claude Code (npm install -g @anthropic-ai/claude-code)"
        )
    # Not the project's .claude/ settings: forge agents land commits there.
    argv = [program, *SETTING_SOURCES, "--append-system-prompt", PARENT_PROMPT]
    argv += ["--allowedTools", PARENT_TOOLS, *args]
    sys.stdout.flush()
    os.chdir(project)
    os.execv(program, argv)
