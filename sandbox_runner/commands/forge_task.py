"""`fks forge land|retry|reset|show|answer TASK`: one task's way through fks forge, by hand."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sandbox_runner.commands.forge import (
    ForgeOptions,
    _context,
    _project,
    _setup,
    run,
)
from sandbox_runner.commands.runs import local_time
from sandbox_runner.console.output import plural
from sandbox_runner.console.shown import one_line
from sandbox_runner.console.units import usd
from sandbox_runner.errors import (
    EXIT_COMPLETE,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    FksError,
    Interrupted,
    UsageError,
)
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.models import ArchitectResult, ReviewResult, parse_answer
from sandbox_runner.forge.pipeline import prepare_retry
from sandbox_runner.forge.report import item_json
from sandbox_runner.forge.selection import forge_lock
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.forge.worker import landed_line, process_task, refusal
from sandbox_runner.git.repo import branch_exists, open_repo, rev
from sandbox_runner.git.runner import git
from sandbox_runner.outcomes import Status, WorkStatus
from sandbox_runner.records.record import StepRecord
from sandbox_runner.records.store import RunStore, new_run_id
from sandbox_runner.signals import signals_as_interrupts

MAX_COMMITS = 20
"""Commits `show` lists per branch (the newest)."""


def _task(project: Path, ref: str) -> tuple[TaskBoard, str]:
    board = TaskBoard(project)
    task_id = board.normalize(ref)
    board.task(task_id)  # a usage error when there is none
    return board, task_id


def _on_its_base(options: ForgeOptions, item: WorkItem | None) -> ForgeOptions:
    """A task goes on on the base it started from, unless --base says otherwise."""
    if options.base is None and item is not None and item.base:
        return replace(options, base=item.base)
    return options


def land(options: ForgeOptions, task: str) -> int:
    """Land an approved task's branch (no agent runs): 0 landed, 1 not (the reason shown)."""
    board, task_id = _task(_project(options.cwd), task)
    item = WorkStore(board.project).get(task_id)
    why = refusal(board, item, task_id, "land")
    if why is not None:
        raise UsageError(why.removesuffix("; skipped"))
    setup = _setup(_on_its_base(options, item))
    session = new_run_id()
    ctx = _context(setup, session, options)
    try:
        with signals_as_interrupts(), forge_lock(setup.project, setup.base, session):
            done = process_task(ctx, task_id, max_cost=None, mode="land")
    except Interrupted:
        return EXIT_INTERRUPTED
    return (
        EXIT_COMPLETE
        if done is not None and done.status == WorkStatus.COMPLETED
        else EXIT_INCOMPLETE
    )


def retry(options: ForgeOptions, task: str) -> int:
    """Run a failed or interrupted task again from the stage it stopped at, with fresh retries."""
    board, task_id = _task(_project(options.cwd), task)
    store = WorkStore(board.project)
    with store.locked():
        item = store.get(task_id)
        if item is None:
            raise UsageError(
                f"{task_id} has not been through fks forge; fks forge run {task_id} starts it"
            )
        if item.held:
            raise UsageError(
                f"{task_id} is being processed by another fks forge run (pid {item.pid})"
            )
        if item.status == WorkStatus.COMPLETED:
            raise UsageError(landed_line(item))
        if item.status not in (WorkStatus.FAILED, WorkStatus.INTERRUPTED) and not item.interrupted:
            raise UsageError(
                f"{task_id} is {item.shown_status}, not failed; fks forge run {task_id} goes on with it"
            )
        setup = _setup(_on_its_base(options, item))  # refuse a dirty checkout before changing it
        prepare_retry(item)
        store.write(item)
    print(
        f"[fks] Retrying {task_id} from {item.stage}",
        file=sys.stderr if options.json_output else sys.stdout,
    )
    return run(replace(options, tasks=[task_id], base=setup.base))


def reset(*, cwd: Path | None, task: str) -> int:
    """Forget a task's forge state: the next run starts it from Analyze on a fresh branch."""
    board, task_id = _task(_project(cwd), task)
    store = WorkStore(board.project)
    with store.locked():
        item = store.get(task_id)
        if item is None:
            raise UsageError(f"{task_id} has not been through fks forge; nothing to reset")
        if item.held:
            raise UsageError(
                f"{task_id} is being processed by another fks forge run (pid {item.pid})"
            )
        store.write(WorkItem(task_id=task_id, seq=item.seq + 1, title=item.title))
        board.set_status(task_id, "To Do", "fks forge: reset; the next run starts from Analyze")
    kept = ""
    if item.branch and branch_exists(board.project, item.branch):
        tip = rev(open_repo(board.project, what="fks forge"), item.branch)
        kept = f"; {item.branch} is at {tip[:12]} until then"
    print(f"Reset {task_id}: the next fks forge run starts it from Analyze{kept}")
    return EXIT_COMPLETE


def show(*, cwd: Path | None, task: str, json_output: bool = False) -> int:
    """A task's history across runs: each work item with its stages, costs, results, branch."""
    project = _project(cwd)
    board, task_id = _task(project, task)
    meta = board.task(task_id).meta
    history = WorkStore(project).history(task_id)
    entries = [_entry(project, item, newest=item is history[-1]) for item in history]
    if json_output:
        doc = {"task": task_id, "title": meta.title, "status": meta.status, "items": entries}
        print(json.dumps(doc, indent=2))
        return EXIT_COMPLETE
    print(f"{task_id}: {one_line(meta.title)} (forge-tasks: {meta.status})")
    if not history:
        print(f"  not through fks forge yet (fks forge run {task_id} starts it)")
    for entry in entries:
        for line in _entry_lines(entry):
            print(f"  {line}")
    return EXIT_COMPLETE


def _entry(project: Path, item: WorkItem, *, newest: bool) -> dict[str, Any]:
    entry = {**item_json(item), "seq": item.seq, "start_commit": item.start_commit}
    entry["updated"] = item.updated.isoformat(timespec="seconds")
    entry["answer"] = item.answer
    entry["state"] = item.state
    stages: list[dict[str, Any]] = []
    store = RunStore(project)
    for run_id in item.runs:
        try:
            record = store.load(run_id)
        except FksError:
            stages.append({"run": run_id, "stage": "?", "status": "record removed"})
            continue
        for step in record.steps:
            stage = step.agent.removeprefix("forge:")
            stages.append(
                {
                    "run": run_id,
                    "stage": stage,
                    "status": step.status,
                    "answered": _answered(stage, step),
                    "cost_usd": round(step.cost_usd, 6),
                    "reason": step.reason,
                }
            )
    entry["stages"] = stages
    entry["commits"] = _commits(project, item) if newest else []
    return entry


_WORDS = {"architect": ("resolved", "asked a question"), "review": ("approved", "rejected")}


def _answered(stage: str, step: StepRecord) -> str | None:
    """What a completed Architect or Review pass answered, in words: `asked a question`,
    `resolved`, `approved`, `rejected` (`invalid answer`: the stage was asked again)."""
    if stage not in _WORDS or step.status != Status.COMPLETE or not step.iterations:
        return None
    claude = step.iterations[-1].claude
    raw = claude.structured_output if claude else None
    answer = (
        parse_answer(ArchitectResult, raw)
        if stage == "architect"
        else parse_answer(ReviewResult, raw)
    )
    if isinstance(answer, str):
        return "invalid answer"
    yes, no = _WORDS[stage]
    return (
        yes if (answer.resolved if isinstance(answer, ArchitectResult) else answer.approved) else no
    )


def _commits(project: Path, item: WorkItem) -> list[str]:
    """The task's own commits on its branch (the newest MAX_COMMITS), "<sha> <subject>"."""
    if not item.branch or not item.start_commit or not branch_exists(project, item.branch):
        return []
    out = git(
        project,
        "log",
        f"--max-count={MAX_COMMITS}",
        "--format=%h %s",
        f"{item.start_commit}..refs/heads/{item.branch}",
        "--",
        check=False,
    )
    return out.splitlines()


def _shown_time(stamp: object) -> str:
    """`2026-11-25 18:40:16` in local time, as `fks runs` and `fks show` write times."""
    try:
        return local_time(datetime.fromisoformat(str(stamp)))
    except ValueError:
        return one_line(str(stamp), 40)


def _entry_lines(entry: dict[str, Any]) -> list[str]:
    what = entry["state"]
    if entry["status"] == WorkStatus.COMPLETED:
        what = f"landed ({(entry['merge_commit'] or '')[:12]})"
    lines = [
        f"#{entry['seq']} {what}: {plural(entry['attempts'], 'attempt')}, "
        f"{plural(entry['retries'], 'retry', 'retries')}, "
        f"{usd(entry['cost_usd'])}, branch {entry['branch'] or '-'} from "
        f"{(entry['start_commit'] or '-')[:12]}, {_shown_time(entry['updated'])}"
    ]
    if entry["error"]:
        lines.append(f"  result: {one_line(entry['error'])}")
    if entry["question"]:
        lines.append(f"  question: {one_line(entry['question'])}")
        answer = one_line(entry["answer"]) if entry["answer"] else None
        waiting = f'none yet (fks forge answer {entry["task"]} "...")'
        lines.append(f"  answer: {answer or waiting}")
    for stage in entry["stages"]:
        said = stage.get("reason") if stage["status"] != Status.COMPLETE else None
        reason = f" ({one_line(said, 200)})" if said else ""
        cost = f" {usd(stage['cost_usd'])}" if "cost_usd" in stage else ""
        status = stage.get("answered") or stage["status"]
        lines.append(f"  {stage['stage']:<17} {status}{cost}{reason}  run {stage['run']}")
    lines += [f"  commit {one_line(commit, 200)}" for commit in entry["commits"]]
    return lines


ANSWER_LIMIT = 20_000
"""Characters of an answer to a clarification (`fks forge answer`, and the forge page of
`fks ui`): it goes into the Architect's prompt, one argv entry."""


def answer(*, cwd: Path | None, task: str, text: str | None, file: Path | None) -> int:
    if (text is None) == (file is None):
        raise UsageError("give the answer as text or with --file FILE (one of them)")
    if file is not None:
        text = _answer_file(file)
    assert text is not None
    task_id = record_answer(cwd=cwd, task=task, text=text)
    print(f"Recorded the answer for {task_id}; the next 'fks forge run' continues it.")
    return EXIT_COMPLETE


def record_answer(*, cwd: Path | None, task: str, text: str) -> str:
    """What `fks forge answer` does (the forge page of `fks ui` too): record `text` as the
    answer to `task`'s open question; the task's id."""
    if not text.strip():
        raise UsageError("the answer is empty")
    if len(text) > ANSWER_LIMIT:
        raise UsageError(
            f"the answer has {len(text)} characters, more than the {ANSWER_LIMIT} taken; shorten it"
        )
    project = _project(cwd)
    board = TaskBoard(project)
    task_id = board.normalize(task)
    board.task(task_id)  # "no task …" rather than "has no open question"
    WorkStore(project).record_answer(task_id, text)
    return task_id


def _answer_file(file: Path) -> str:
    """The text of --file, read no further than the longest answer taken."""
    most = 4 * ANSWER_LIMIT  # UTF-8 bytes of ANSWER_LIMIT characters, at most
    try:
        with file.open("rb") as handle:
            data = handle.read(most + 1)
        if len(data) > most:
            raise UsageError(
                f"--file {file}: longer than the {ANSWER_LIMIT} characters an answer may have; "
                "shorten it"
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--file {file}: cannot read it ({exc})") from None
