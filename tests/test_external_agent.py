"""An external Claude Code project's `.claude/agents/<name>` run from another repository with
`--sandbox`: the step's worktree, branch and commits belong to the external project.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.claude import (
    assert_claude_stats,
    assert_no_secret,
    bash,
    branches,
    claude_env,
    containers,
    run_fks,
    run_record,
    subjects,
)
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import eventually_none, git, init_repo, write_config

from sandbox_runner.plan.prompts import MARKER

pytestmark = [pytest.mark.docker, pytest.mark.claude]

AGENT_BODY = "You are REVIEWER-BODY-7731, a meticulous code reviewer of the other project."
AGENT_FILE = f"""---
name: meticulous-reviewer
description: Reviews the other project's code and writes REVIEW.md
tools: Bash, Read
---
{AGENT_BODY}
"""


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(host="0.0.0.0") as server:
        yield server


@pytest.fixture
def repos(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(main, other): `other` is a Claude Code project with `.claude/agents/reviewer.md`."""
    other = init_repo(
        tmp_path / "other",
        {"app.py": "print('other')\n", ".claude/agents/reviewer.md": AGENT_FILE},
    )
    git(other, "checkout", "-q", "-b", "develop")  # the current branch is the base, not main
    main = init_repo(tmp_path / "main", {"README.md": "main project\n"})
    write_config(main, {"agents": {"rev": {"path": "../other/.claude/agents/reviewer"}}})
    git(main, "add", "forge")
    git(main, "commit", "-qm", "config")
    yield main, other
    for repo in (main, other):
        leftovers = containers(f"fks.repo={repo}")
        if leftovers:
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


@pytest.mark.parametrize(
    ("target", "slug"),
    [("../other/.claude/agents/reviewer:2", "reviewer"), ("rev:2", "rev")],
    ids=["dsl-path", "config-path"],
)
def test_external_agent_works_in_its_own_repository(
    fake: FakeAnthropic, repos: tuple[Path, Path], target: str, slug: str
) -> None:
    main, other = repos
    main_head, other_head = git(main, "rev-parse", "HEAD"), git(other, "rev-parse", "HEAD")
    main_branches = branches(main)
    fake.add_conversation(
        [
            [
                bash(
                    "pwd && git rev-parse --abbrev-ref HEAD && ls .claude/agents "
                    "&& echo 'Looks fine.' > REVIEW.md && git add REVIEW.md "
                    "&& git commit -qm 'review: notes on app.py'",
                    "review",
                )
            ],
            [{"text": f"Review written.\n{MARKER}"}],
        ]
    )

    res = run_fks(
        "run",
        target,
        "--prompt",
        "Review app.py.",
        "--sandbox",
        "--json",
        cwd=main,
        env=claude_env(fake),
    )
    assert res.code == 0, res.tail()
    assert not fake.exhausted, [r.answer for r in fake.requests]

    record = run_record(main)  # the run is recorded where it was started
    run_id = record["id"]
    step = record["steps"][0]
    branch = f"fks/{run_id}/1-{slug}"
    assert step["repo"] == str(other), step
    assert (step["base_branch"], step["branch"]) == ("develop", branch), step
    assert step["merged"] is True, step
    assert_claude_stats(step["iterations"][0])

    # The CLI ran in the other repository's workspace, on the step branch, as the agent.
    first, last = fake.main_requests(0)[0], fake.main_requests(0)[-1]
    shown = last.tool_results[0]["content"].splitlines()
    assert shown[0] == "/workspace", shown
    assert shown[1] == branch, shown
    assert "reviewer.md" in shown[2:], shown
    assert AGENT_BODY in first.system_text, "the agent file's body is not the agent's prompt"
    assert first.prompt == "Review app.py."

    # The agent's commit is on the other repository's current branch; the branch stays there.
    assert subjects(other, "develop")[0] == "review: notes on app.py"
    assert git(other, "rev-parse", "--abbrev-ref", "HEAD") == "develop"
    assert (other / "REVIEW.md").read_text() == "Looks fine.\n"
    assert branch in branches(other)
    assert git(other, "rev-parse", "main") == other_head
    assert git(other, "status", "--porcelain") == ""

    # The main repository is untouched.
    assert git(main, "rev-parse", "HEAD") == main_head
    assert branches(main) == main_branches
    assert not (main / "REVIEW.md").exists()
    assert git(main, "status", "--porcelain") == ""

    def volumes() -> list[str]:
        label = f"label=fks.run={record['id']}"
        out = subprocess.run(
            ["docker", "volume", "ls", "-q", "--filter", label],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split()

    eventually_none(volumes, "a workspace")  # none is left, in either repository

    assert res.json["steps"][0]["branch"] == branch
    assert containers(f"fks.run={run_id}") == []
    assert_no_secret(main, other)


def test_external_agent_without_a_prompt_runs_on_its_own_instructions(
    fake: FakeAnthropic, repos: tuple[Path, Path]
) -> None:
    # seed 000's headline use: `fks "/proj/.claude/agents/reviewer:3"`, no prompt; the agent
    # file is the instruction. `claude -p ""` refuses to run ("Input must be provided …").
    main, _ = repos
    fake.add_conversation([[{"text": f"Nothing to review.\n{MARKER}"}]])
    res = run_fks(
        "run", "../other/.claude/agents/reviewer:2", "--sandbox", cwd=main, env=claude_env(fake)
    )
    assert "Input must be provided" not in res.stdout + res.stderr, res.tail()
    assert res.code == 0, res.tail()
    assert fake.conversations_started == 1
    assert AGENT_BODY in fake.main_requests(0)[0].system_text
