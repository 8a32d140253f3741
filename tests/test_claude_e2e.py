"""The real claude CLI in the agent image under `fks run --sandbox`, driven by the fake Messages API.

The fake listens on the host (0.0.0.0); containers reach it as `host.docker.internal`. fks gets
a long fake API key, which must never show up in its output or under `.forge/`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.claude import (
    API_KEY,
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
from fks_testing.helpers import FKS, git, init_repo, write_config
from fks_testing.teams import (
    PLAN_MD,
    SPECS_MD,
    RalphAgents,
)

from sandbox_runner.plan.prompts import MARKER

pytestmark = [pytest.mark.docker, pytest.mark.claude]


def iterations(record: dict[str, Any], step: int = 1) -> list[dict[str, Any]]:
    its = record["steps"][step - 1]["iterations"]
    assert isinstance(its, list)
    return its


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(host="0.0.0.0") as server:
        yield server


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A repository with two Claude config agents; its containers are removed afterwards."""
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    configure(path, {})
    yield path
    leftovers = containers(f"fks.repo={path}")
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


def configure(repo: Path, sandbox: dict[str, Any]) -> None:
    write_config(
        repo,
        {
            "agents": {
                "worker": {"systemPromptText": "You are the e2e worker.", "maxTurns": 10},
                "limited": {"systemPromptText": "You are the limited worker.", "maxTurns": 1},
            },
            "sandbox": sandbox,
        },
    )
    git(repo, "add", "forge")
    git(repo, "commit", "-qm", "fks config")


# --- Ralph end to end ----------------------------------------------------------------------------


@pytest.mark.timeout(420)
def test_ralph_chain_plans_and_builds_in_containers(fake: FakeAnthropic, tmp_path: Path) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    (repo / "README.md").write_text("# project\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "initial")
    init = run_fks("init", cwd=repo, timeout=60)
    assert init.code == 0, init.tail()
    assert "fks-template" in (repo / "ralph" / "PLAN.md").read_text()
    (repo / "ralph" / "PLAN.md").write_text(PLAN_MD)
    (repo / "ralph" / "SPECS.md").write_text(SPECS_MD)
    git(repo, "add", "ralph", "system-prompts", "forge")
    git(repo, "commit", "-qm", "Add fks Ralph setup")
    agents = RalphAgents()
    fake.responder = agents

    try:
        res = run_fks(
            "run",
            "--chain",
            "ralph",
            "--sandbox",
            "--json",
            cwd=repo,
            env=claude_env(fake),
            timeout=300,
        )
    finally:
        leftovers = containers(f"fks.repo={repo}")
        if leftovers:
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)
    assert not agents.errors, agents.errors
    assert res.code == 0, res.tail()
    assert not fake.exhausted, [r.answer for r in fake.requests]
    assert [role for role, _ in agents.first_requests] == [
        "planner",
        "builder",
        "builder",
        "builder",
    ], res.tail()

    # The tasks on the base branch are Done, and the second depended on the first.
    listed = subprocess.run(
        [shutil.which("forge-tasks") or str(Path(FKS).parent / "forge-tasks"), "list", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    tasks = {t["title"]: t for t in json.loads(listed.stdout)}
    assert set(tasks) == {"Write greeting.txt", "Write farewell.txt"}, listed.stdout
    assert {t["status"] for t in tasks.values()} == {"Done"}, listed.stdout
    greeting, farewell = tasks["Write greeting.txt"], tasks["Write farewell.txt"]
    assert farewell["dependencies"] == [greeting["id"]]

    # The implementation commits are on the base branch, in dependency order.
    log = subjects(repo)
    for expected in (
        "plan: greeting and farewell",
        f"{greeting['id']}: Write greeting.txt",
        f"{greeting['id']}: done",
        f"{farewell['id']}: Write farewell.txt",
        f"{farewell['id']}: done",
    ):
        assert expected in log, f"{expected!r} not on main:\n" + "\n".join(log)
    assert log.index(f"{farewell['id']}: done") < log.index(f"{greeting['id']}: done")
    assert (repo / "greeting.txt").read_text() == "hello\n"
    assert (repo / "farewell.txt").read_text() == "goodbye\n"
    assert git(repo, "status", "--porcelain") == ""

    record = run_record(repo)
    run_id = record["id"]
    assert record["status"] == "complete"
    for index, name in ((1, "fk-planner"), (2, "fk-builder")):
        step = record["steps"][index - 1]
        assert step["branch"] == f"fks/{run_id}/{index}-{name}"
        assert step["branch"] in branches(repo)
        assert step["merged"] is True, step
    planner_its, builder_its = iterations(record, 1), iterations(record, 2)
    assert [it["reason"] for it in planner_its] == ["marker"]
    assert [it["reason"] for it in builder_its] == ["no_marker", "no_marker", "marker"]
    for it in planner_its + builder_its:
        assert_claude_stats(it)
        assert it["container_id"], it
    assert [it["claude"]["turns"] for it in planner_its + builder_its] == [3, 4, 4, 2]
    sessions = [it["claude"]["session_id"] for it in planner_its + builder_its]
    assert len(set(sessions)) == 4, "every iteration is a fresh claude session"
    assert set(sessions) == set(agents.sessions), (sessions, agents.sessions)

    # --json carries the same per-iteration stats.
    result = res.json
    assert result["success"] is True and result["run_id"] == run_id
    assert result["cost_usd"] > 0
    for step_json, step_record in zip(result["steps"], record["steps"], strict=True):
        details = [d["claude"] for d in step_json["iteration_details"]]
        assert details == [it["claude"] for it in step_record["iterations"]]
        assert step_json["cost_usd"] > 0

    # What the agents were told: the default prompts, the mode-awareness text, their roles.
    (_, planner_request), (_, builder_request) = agents.first_requests[:2]
    assert "Compare ralph/PLAN.md and ralph/SPECS.md" in planner_request.prompt
    assert "Take the next task from forge-tasks" in builder_request.prompt
    for request in (planner_request, builder_request):
        assert "How you are being run" in request.system_text
    assert "[fks] Chain complete (2/2 steps" in res.stderr, res.tail()
    assert_no_secret(repo)
    assert containers(f"fks.run={run_id}") == []


# --- the marker only counts when the model says it -----------------------------------------------


def test_marker_in_a_tool_result_does_not_end_the_loop(fake: FakeAnthropic, repo: Path) -> None:
    task = repo / "ralph" / "TASK.md"
    task.parent.mkdir()
    task.write_text(f"Write done.txt.\nWhen everything is finished, print\n{MARKER}\n")
    git(repo, "add", "ralph")
    git(repo, "commit", "-qm", "task")
    fake.add_conversation(
        [
            [bash("cat ralph/TASK.md", "read the task")],
            [{"text": f"The task says to print {MARKER} only at the end; work remains."}],
        ]
    )
    fake.add_conversation([[{"text": f"All finished.\n{MARKER}"}]])

    res = run_fks(
        "run",
        "worker:3",
        "--prompt-file",
        "ralph/TASK.md",
        "--sandbox",
        "--json",
        cwd=repo,
        env=claude_env(fake),
    )
    assert res.code == 0, res.tail()
    read = fake.main_requests(0)[-1].tool_results
    assert read and MARKER in read[0]["content"].splitlines(), (
        "the agent did not see the marker in its tool result"
    )
    record = run_record(repo)
    its = iterations(record)
    assert [(it["reason"], it["marker"]) for it in its] == [
        ("no_marker", False),
        ("marker", True),
    ], res.tail()
    assert MARKER in (repo / ".forge" / "runs" / record["id"] / its[0]["log"]).read_text(), (
        "the first iteration's log should hold the tool output with the marker"
    )
    assert "[fks] Iteration 2/3" in res.stderr and "Iteration 3/3" not in res.stderr, res.tail()
    assert res.json["steps"][0]["iterations"] == 2
    assert_no_secret(repo)


# --- limits ----------------------------------------------------------------------------------------


def test_error_max_turns_ends_the_iteration_incomplete(fake: FakeAnthropic, repo: Path) -> None:
    fake.add_conversation(
        [[bash("echo one", "one")], [bash("echo two", "two")], [{"text": f"done\n{MARKER}"}]]
    )
    fake.add_conversation([[{"text": f"Short and done.\n{MARKER}"}]])

    res = run_fks(
        "run",
        "limited:2",
        "--prompt",
        "Loop.",
        "--sandbox",
        "--json",
        cwd=repo,
        env=claude_env(fake),
    )
    assert res.code == 0, res.tail()
    assert len(fake.main_requests(0)) == 1, "maxTurns 1 should stop the CLI after one turn"
    record = run_record(repo)
    first, second = iterations(record)
    assert first["reason"] == "max_turns", first
    assert first["marker"] is False and first["counted"] is True
    assert_claude_stats(first, subtype="error_max_turns")
    assert second["reason"] == "marker"
    assert "Iteration 1 hit the turn limit (error_max_turns)" in res.stderr, res.tail()
    details = res.json["steps"][0]["iteration_details"]
    assert details[0]["reason"] == "max_turns"
    assert details[0]["claude"]["subtype"] == "error_max_turns"
    assert_no_secret(repo)


def test_max_cost_stops_the_chain_after_the_first_step(fake: FakeAnthropic, repo: Path) -> None:
    fake.add_conversation(
        [
            [bash("echo one > one.txt && git add one.txt && git commit -qm 'step one'", "commit")],
            [{"text": f"Step one done.\n{MARKER}"}],
        ]
    )
    fake.add_conversation([[{"text": f"Step two must never run.\n{MARKER}"}]])

    res = run_fks(
        "run",
        "worker:2 -> worker:2",
        "--prompt",
        "Work.",
        "--max-cost",
        "0.0025",  # two turns of the fake ($0.00135 each) cross it
        "--sandbox",
        "--json",
        cwd=repo,
        env=claude_env(fake),
    )
    assert res.code == 1, res.tail()
    assert fake.conversations_started == 1, "step 2 started a claude session"
    record = run_record(repo)
    assert (record["status"], record["reason"], record["failed_at"]) == (
        "incomplete",
        "max_cost",
        2,
    ), record
    one, two = record["steps"]
    assert one["status"] == "complete" and one["merged"] is True
    spent = one["iterations"][0]["claude"]["cost_usd"]
    assert spent and spent >= 0.0025, one["iterations"]
    assert two["status"] == "incomplete" and two["reason"] == "max_cost"
    assert two["iterations"] == [] and two["branch"] is None, two
    assert not any(b.endswith("/2-worker") for b in branches(repo))
    assert subjects(repo)[0] == "step one"
    stopped = f"Stopped: spent ${spent:.4f} of --max-cost $0.0025; not starting step 2"
    assert stopped in res.stderr, res.tail()
    result = res.json
    assert result["failed_at"] == 2 and result["steps"][-1]["reason"] == "max_cost"
    assert result["cost_usd"] == pytest.approx(spent, rel=1e-3)
    assert containers(f"fks.run={record['id']}") == []
    assert_no_secret(repo)


def test_rate_limit_backs_off_without_using_an_iteration(fake: FakeAnthropic, repo: Path) -> None:
    # The CLI's own retries would hide the 429 from fks: CLAUDE_CODE_MAX_RETRIES=0 goes in.
    configure(repo, {"env": ["CLAUDE_CODE_MAX_RETRIES"]})
    fake.add_conversation([{"error": 429, "retry_after": 0, "times": "forever"}])
    fake.add_conversation([[{"text": f"Got through.\n{MARKER}"}]])

    res = run_fks(
        "run",
        "worker:1",
        "--prompt",
        "Go.",
        "--sandbox",
        "--json",
        cwd=repo,
        env=claude_env(fake, CLAUDE_CODE_MAX_RETRIES="0"),
    )
    assert res.code == 0, res.tail()
    assert len(fake.main_requests(0)) == 1, "CLAUDE_CODE_MAX_RETRIES=0 did not reach the CLI"
    record = run_record(repo)
    limited, ok = iterations(record)
    assert (limited["reason"], limited["counted"], limited["number"]) == (
        "rate_limited",
        False,
        1,
    ), limited
    assert (ok["reason"], ok["counted"], ok["number"]) == ("marker", True, 1), ok
    assert limited["log"] != ok["log"]
    assert "rate limited by the API; waiting" in res.stderr, res.tail()
    assert "does not use up an iteration" in res.stderr
    details = res.json["steps"][0]["iteration_details"]
    assert [d["counted"] for d in details] == [False, True]
    assert res.json["steps"][0]["iterations"] == 1
    assert res.seconds >= 5, "fks should have backed off before retrying"
    assert_no_secret(repo)


# --- credentials -----------------------------------------------------------------------------------


def test_missing_credentials_fail_before_anything_starts(fake: FakeAnthropic, repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    res = run_fks("run", "worker:2", "--prompt", "Go.", "--sandbox", cwd=repo, env={}, timeout=60)
    assert res.code == 2, res.tail()
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fks: "), res.tail()
    assert "ANTHROPIC_API_KEY" in lines[0] and "CLAUDE_CODE_OAUTH_TOKEN" in lines[0], lines[0]
    assert res.stdout.strip() == "", res.tail()
    assert not (repo / ".forge" / "runs").exists() or not any((repo / ".forge" / "runs").iterdir())
    assert containers(f"fks.repo={repo}") == []
    assert fake.requests == []
    assert git(repo, "rev-parse", "HEAD") == head and branches(repo) == ["main"]


def test_a_loopback_api_is_used_only_where_the_container_shares_the_host_network(
    repo: Path,
) -> None:
    """With `network: host` the container's loopback is this machine's: a loopback
    ANTHROPIC_BASE_URL works. Through the egress proxy (the default) it would be the proxy's
    own: refused before anything starts, naming the fix (every form and network:
    tests/backends/docker/test_checks.py)."""
    with FakeAnthropic(host="127.0.0.1") as fake:
        fake.add_conversation([[{"text": f"Done.\n{MARKER}"}]])
        env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{fake.port}", "ANTHROPIC_API_KEY": API_KEY}
        configure(repo, {"network": "host"})
        res = run_fks("run", "worker:1", "--prompt", "Go.", "--sandbox", cwd=repo, env=env)
        assert res.code == 0, res.tail()
        assert {r.api_key for r in fake.main_requests()} == {API_KEY}
        configure(repo, {})
        head, before = git(repo, "rev-parse", "HEAD"), branches(repo)
        runs = sorted((repo / ".forge" / "runs").iterdir())
        res = run_fks("run", "worker:1", "--prompt", "Go.", "--sandbox", cwd=repo, env=env)
    assert res.code == 2, res.tail()
    assert res.stderr.count("\n") == 1 and "use http://host.docker.internal:" in res.stderr
    assert sorted((repo / ".forge" / "runs").iterdir()) == runs
    assert git(repo, "rev-parse", "HEAD") == head and branches(repo) == before
    assert containers(f"fks.repo={repo}") == []


def test_the_key_never_enters_the_container(fake: FakeAnthropic, repo: Path) -> None:
    """Default network (allowlist): Claude talks to the API through fks's egress proxy, which
    puts the real key on the way out; the container holds only a placeholder."""
    fake.add_conversation(
        [
            [
                bash(
                    # The key spelled backwards: the command itself (kept in Claude's
                    # transcript, shown on screen) must not be what is found.
                    f'k=$(echo "{API_KEY[::-1]}" | rev); echo "key=$ANTHROPIC_API_KEY"; '
                    'env | grep -c "$k"; '
                    'grep -rl "$k" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l',
                    "look for the key",
                )
            ],
            [{"text": f"Done.\n{MARKER}"}],
        ]
    )
    res = run_fks("run", "worker:2", "--prompt", "Go.", "--sandbox", cwd=repo, env=claude_env(fake))
    assert res.code == 0, res.tail()
    shown = fake.main_requests(0)[-1].tool_results[0]["content"].split()
    assert shown[0] == "key=fks-placeholder-the-egress-proxy-adds-the-real-credential", shown
    assert shown[1:] == ["0", "0"], shown  # not in the environment, not in any file
    keys = {r.api_key for r in fake.requests if r.kind == "main"}
    assert keys == {API_KEY}, "the fake API did not receive the host's real key"
    assert_no_secret(repo)


def test_secrets_printed_by_the_agent_are_masked(fake: FakeAnthropic, repo: Path) -> None:
    configure(repo, {"network": "open"})  # the container holds the key itself
    fake.add_conversation(
        [
            [
                bash(
                    'echo "key=$ANTHROPIC_API_KEY"; env | grep -c ANTHROPIC_API_KEY', "show the key"
                )
            ],
            [{"text": f"The key I was given is {API_KEY}.\n{MARKER}"}],
        ]
    )
    res = run_fks(
        "run", "worker:2", "--prompt", "Go.", "--sandbox", "--json", cwd=repo, env=claude_env(fake)
    )
    assert res.code == 0, res.tail()
    shown = fake.main_requests(0)[-1].tool_results[0]["content"]
    assert API_KEY in shown, "the container did not get the key (so masking was not exercised)"
    record = run_record(repo)
    log = (repo / ".forge" / "runs" / record["id"] / iterations(record)[0]["log"]).read_text()
    assert "key=********" in log, log[-2000:]
    assert "The key I was given is ********" in res.stderr, res.tail()
    assert iterations(record)[0]["marker"] is True
    assert_no_secret(repo)
