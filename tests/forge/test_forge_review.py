"""The Review stage gets the branch's diff in `.forge/review.diff`, never on a command line: a diff
over the kernel's 128 KiB limit for one argument is cut (at a line end, the reviewer told) and
the review runs, locally and in containers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import FKS, git, init_repo, write_config

from sandbox_runner.forge.prompts import MAX_DIFF

pytestmark = [
    pytest.mark.claude,
    pytest.mark.skipif(shutil.which("claude") is None, reason="needs the claude CLI"),
]

LINES = 6000  # ~300 KB of diff
LINE = "line {:05d} of a long generated file, well over the argument limit\n"


class Reviewer:
    """Analyst, implementer (commits a 300 KB file) and a reviewer who reads the diff's file."""

    def __init__(self) -> None:
        self.sessions: dict[str, str] = {}
        self.review_prompts: list[str] = []
        self.diff_reads: list[str] = []

    def __call__(self, request: Request) -> Any:
        session = request.session_id or "?"
        results = json.dumps(request.tool_results)
        if self.sessions.get(session) == "review" and "Structured output" not in results:
            self.diff_reads.append(results)
            return [{"tool": "StructuredOutput", "input": {"approved": True}}]
        if session in self.sessions:
            return [{"text": "Done."}]
        system = request.system_text
        if "You analyze one task" in system:
            self.sessions[session] = "analyze"
            plan = {"complexity": "low", "plan": "Write big.txt.", "sufficient": True}
            return [{"tool": "StructuredOutput", "input": plan}]
        if "You implement one task" in system:
            self.sessions[session] = "implement"
            command = (
                f"for i in $(seq 1 {LINES}); do printf '{LINE.strip()}\\n' $i; done > big.txt"
                " && git add big.txt && git commit -qm 'big file'"
            )
            return [{"tool": "Bash", "input": {"command": command, "description": "work"}}]
        self.sessions[session] = "review"
        self.review_prompts.append(request.prompt)
        # The start and the last line the file kept.
        return [
            {"tool": "Read", "input": {"file_path": ".forge/review.diff", "limit": 3}},
            {
                "tool": "Grep",
                "input": {
                    "pattern": "^[+]line",
                    "path": ".forge/review.diff",
                    "output_mode": "count",
                },
            },
        ]


def run_forge(
    tmp_path: Path, sandbox: bool
) -> tuple[subprocess.CompletedProcess[str], Path, Reviewer]:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(repo, {"forge": {"maxReviewRetries": 0, "maxTurns": 5}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    subprocess.run([FKS, "forge", "create", "big"], cwd=repo, check=True, capture_output=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    team = Reviewer()
    with FakeAnthropic(host="0.0.0.0" if sandbox else "127.0.0.1", responder=team) as fake:
        if sandbox:
            from fks_testing.claude import claude_env

            env = isolated_environ(claude_env(fake))
        else:
            env = isolated_environ(fake.env(tmp_path / "claude-config"))
        done = subprocess.run(
            [FKS, "forge", "run", "--json", *(["--sandbox"] if sandbox else [])],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=500,
            stdin=subprocess.DEVNULL,
        )
    return done, repo, team


def check(done: subprocess.CompletedProcess[str], repo: Path, team: Reviewer) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (task,) = json.loads(done.stdout)["tasks"]
    assert task["status"] == "completed", task
    assert (repo / "big.txt").stat().st_size > 300_000
    (prompt,) = team.review_prompts
    assert "line 00001" not in prompt and len(prompt) < 5000
    assert ".forge/review.diff" in prompt and "was cut" in prompt
    (reads,) = team.diff_reads
    assert "diff --git a/big.txt b/big.txt" in reads  # the diff's start, from the file
    found = re.search(r"Found (\d+) total", reads)
    assert found is not None, reads[-500:]
    kept, per_line = int(found.group(1)), len(LINE) + 1  # `+` and the line
    assert kept * per_line <= MAX_DIFF < (kept + 3) * per_line  # whole lines, up to the limit


@pytest.mark.timeout(300)
def test_a_diff_over_the_argument_limit_reaches_the_reviewer_locally(tmp_path: Path) -> None:
    check(*run_forge(tmp_path, sandbox=False))


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_a_diff_over_the_argument_limit_reaches_the_reviewer_in_a_container(
    tmp_path: Path,
) -> None:
    check(*run_forge(tmp_path, sandbox=True))
