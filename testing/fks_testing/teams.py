"""Scripted agents for the fake Messages API: a Ralph planner and builder, and forge teams that
analyze, implement and approve any task."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fks_testing.claude import bash
from fks_testing.conversations import Request
from sandbox_runner.plan.prompts import MARKER

PLANNER = "# fk:planner"
BUILDER = "# fk:builder"
FILES = {"greeting.txt": "hello", "farewell.txt": "goodbye"}
# `TASK-abc123  To Do        high    Write greeting.txt  (AC 0/1)  (depends on: …)`
TASK_LINE = re.compile(r"^(TASK-[0-9a-z]+)\s+To Do\s+\S+\s+(.+?)(?:\s{2}\(.*)?$", re.MULTILINE)
CREATED = re.compile(r"Created (TASK-[0-9a-z]+)")

PLAN_MD = """# Plan

## Goal
Two small text files that greet and say goodbye.

## Milestones
1. greeting.txt
2. farewell.txt, after greeting.txt exists
"""

SPECS_MD = """# Specifications

## S1. greeting.txt
It contains `hello`.

## S2. farewell.txt
It contains `goodbye`. It is written after greeting.txt.
"""


class RalphAgents:
    """Plays fk:planner and fk:builder, reading its tool results to learn the task ids."""

    def __init__(self) -> None:
        self.sessions: dict[str, str] = {}  # session id -> role
        self.first_requests: list[tuple[str, Request]] = []
        self.errors: list[str] = []

    def __call__(self, request: Request) -> list[dict[str, Any]] | None:
        # An exception here would kill the fake's answer and the CLI would retry for minutes.
        try:
            return self._answer(request)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return [{"text": f"test responder failed: {exc!r}"}]

    def _answer(self, request: Request) -> list[dict[str, Any]] | None:
        system = request.system_text
        role = "planner" if PLANNER in system else "builder" if BUILDER in system else None
        if role is None:
            return None
        session = request.session_id or f"no-session-{len(self.sessions)}"
        if session not in self.sessions:
            self.sessions[session] = role
            self.first_requests.append((role, request))
        results = [str(r["content"]) for r in request.tool_results]
        return self.planner(results) if role == "planner" else self.builder(results)

    @staticmethod
    def planner(results: Sequence[str]) -> list[dict[str, Any]]:
        if not results:
            return [
                {"text": "Reading the plan, then creating the first task."},
                bash(
                    "if grep -l fks-template ralph/PLAN.md ralph/SPECS.md; then echo TEMPLATES-LEFT; "
                    'else forge-tasks create "Write greeting.txt" --description "SPECS.md S1" '
                    '--ac "greeting.txt contains hello" --priority high; fi',
                    "create task 1",
                ),
            ]
        created = CREATED.search(results[0])
        if created is None:
            return [{"text": "ralph/PLAN.md and ralph/SPECS.md are still the fks init templates"}]
        if len(results) == 1:
            return [
                bash(
                    'forge-tasks create "Write farewell.txt" --description "SPECS.md S2" '
                    f'--ac "farewell.txt contains goodbye" --depends-on {created.group(1)} '
                    '&& git add forge/tasks && git commit -qm "plan: greeting and farewell" '
                    "&& git log --oneline -1",
                    "create task 2 and commit",
                )
            ]
        return [{"text": f"Both requirements have tasks.\n{MARKER}"}]

    @staticmethod
    def builder(results: Sequence[str]) -> list[dict[str, Any]]:
        if not results:
            return [bash("forge-tasks list --ready --plain", "ready tasks")]
        ready = TASK_LINE.findall(results[0])
        if not ready:
            return [{"text": f"No task is ready and none is in progress.\n{MARKER}"}]
        task, title = ready[0]
        name = title.split()[-1]
        if len(results) == 1:
            return [
                bash(
                    f'forge-tasks edit {task} --status "In Progress" && echo {FILES[name]} > {name} '
                    f'&& git add {name} forge/tasks && git commit -qm "{task}: {title}"',
                    "implement",
                )
            ]
        if len(results) == 2:
            return [
                bash(
                    f"forge-tasks edit {task} --status Done --check-ac 1 "
                    f'&& git add forge/tasks && git commit -qm "{task}: done"',
                    "mark done",
                )
            ]
        return [{"text": f"Finished {task}; other tasks may remain."}]


class Team:
    """Every forge agent of four independent tasks, each writing a file of its own; the
    implementer takes a few seconds, so that the four are in flight together."""

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.errors: list[str] = []

    def __call__(self, request: Request) -> Any:
        try:
            return self._answer(request)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return [{"text": f"test responder failed: {exc!r}"}]

    def _answer(self, request: Request) -> Any:
        session = request.session_id or "?"
        if session in self.sessions:
            return [{"text": "Done."}]
        self.sessions.add(session)
        system, prompt = request.system_text, request.prompt
        title = prompt.split(":", 1)[1].splitlines()[0].strip()
        if "You analyze one task" in system:
            answer = {
                "complexity": "low",
                "plan": "Write the file.",
                "relevant_files": [],
                "implementation_steps": ["write", "commit"],
                "context": "text",
                "sufficient": True,
            }
            return [{"tool": "StructuredOutput", "input": answer}]
        if "You implement one task" in system:
            command = (
                f"sleep 3; echo {title} > {title}.txt && git add -A && git commit -qm '{title}'"
            )
            return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
        if "You review the implementation" in system:
            answer = {"approved": True, "issues": [], "suggestions": []}
            return [{"tool": "StructuredOutput", "input": answer}]
        self.errors.append(f"unexpected request: {prompt[:120]!r}")
        return [{"text": "?"}]


def approving_team(request: Request) -> Any:
    """Analyze, implement (a file named after the task, committed) and approve any task."""
    if any(r for r in request.tool_results):
        return [{"text": "Done."}]
    system = request.system_text
    if "You analyze one task" in system:
        plan = {"complexity": "low", "plan": "Write it.", "sufficient": True}
        return [{"tool": "StructuredOutput", "input": plan}]
    if "You implement one task" in system:
        task = re.search(r"(TASK-[0-9a-z]+)", request.prompt)
        name = task.group(1) if task else "none"
        command = f"echo hi > {name}.txt && git add {name}.txt && git commit -qm 'add {name}'"
        return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
    if "You review the implementation of one task" in system:
        return [{"tool": "StructuredOutput", "input": {"approved": True}}]
    return [{"text": f"unexpected: {request.prompt[:100]}"}]
