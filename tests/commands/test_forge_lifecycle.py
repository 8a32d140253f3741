"""`fks forge` over a task's life, as a user drives it: concurrent runs, runs again after a
landing, blocked landings, land/retry/reset/show, statuses and locks. The agents are a fake
`claude` on PATH (tests/agents/fake_claude.py), so every stage runs through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fks_testing.attacks import module_payloads
from fks_testing.helpers import FKS, Result, fks, git, init_repo, write_config

FAKE_CLAUDE = Path(__file__).parents[1] / "agents" / "fake_claude.py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(FAKE_CLAUDE)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_STATE": str(tmp_path / "fake")}


def create(repo: Path, title: str) -> str:
    done = fks("forge", "create", title, "--description", f"Make {title}", cwd=repo)
    assert done.code == 0, done.output
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"task {title}")
    return done.stdout.split()[-1]


def calls(env: dict[str, str]) -> Counter[tuple[str, str]]:
    path = Path(env["FAKE_STATE"]) / "calls.jsonl"
    if not path.exists():
        return Counter()
    lines = path.read_text().splitlines()
    return Counter((json.loads(line)["task"], json.loads(line)["stage"]) for line in lines)


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until `path` exists (the fake agent reached its hold), or `proc` ended without it."""
    deadline = time.monotonic() + 300  # only a bound on a hung test, not part of the outcome
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def start(repo: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [FKS, "forge", "run", *args, "--cwd", str(repo)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_concurrent_runs_process_each_task_once(repo: Path, env: dict[str, str]) -> None:
    tasks = {create(repo, "first"), create(repo, "second")}
    state = Path(env["FAKE_STATE"])
    # Run A takes one task and is held in its review; run B, started then, sees the other one
    # ready and lands it; A, released, must not process that one again.
    run_a = start(repo, {**env, "FAKE_HOLD": "review:*"}, "--parallel", "1")
    wait_for(state / "held", run_a)
    first = (state / "held").read_text()
    (second,) = tasks - {first}
    run_b = fks("forge", "run", "--cwd", str(repo), env=env, timeout=300)
    assert run_b.code == 0, run_b.output
    (state / "go").write_text("")
    out, _ = run_a.communicate(timeout=300)
    assert run_a.returncode == 0, out
    assert calls(env) == Counter(
        {(t, s): 1 for t in (first, second) for s in ("analyze", "implement", "review")}
    )
    assert (repo / f"{first}.txt").exists() and (repo / f"{second}.txt").exists()
    status = json.loads(fks("forge", "status", "--json", "--cwd", str(repo)).stdout)
    assert {i["task"]: i["status"] for i in status} == {first: "completed", second: "completed"}


def forge(repo: Path, env: dict[str, str], *args: str) -> Result:
    return fks("forge", *args, "--cwd", str(repo), env=env, timeout=300)


def item(repo: Path, task: str) -> dict[str, Any]:
    done = fks("forge", "show", task, "--json", "--cwd", str(repo))
    assert done.code == 0, done.output
    data: dict[str, Any] = json.loads(done.stdout)
    return data


STAGES = ("analyze", "implement", "review")


def test_a_landed_task_is_refused_unless_forced(repo: Path, env: dict[str, str]) -> None:
    task = create(repo, "once")
    assert forge(repo, env, "run").code == 0
    landed = git(repo, "rev-parse", "main")
    branch = git(repo, "rev-parse", f"fks/forge/{task}")
    again = forge(repo, env, "run", task)
    assert again.code == 2, again.output
    assert len(again.stderr.strip().splitlines()) == 1
    assert f"{task} already landed on 'main' ({landed[:12]})" in again.stderr
    assert "--force" in again.stderr
    assert git(repo, "rev-parse", f"fks/forge/{task}") == branch  # not reset to the base
    assert item(repo, task)["status"] == "Done"
    assert calls(env) == Counter({(task, s): 1 for s in STAGES})
    forced = forge(repo, env, "run", "--force", task)
    assert forced.code == 0, forced.output
    assert calls(env) == Counter({(task, s): 2 for s in STAGES})
    assert [i["seq"] for i in item(repo, task)["items"]] == [1, 2]


def test_an_approved_task_whose_landing_was_blocked_lands_when_run_again(
    repo: Path, env: dict[str, str]
) -> None:
    task = create(repo, "blocked")
    (repo / f"{task}.txt").write_text("the user's own, untracked\n")
    first = forge(repo, env, "run")
    assert first.code == 1, first.output
    assert "could not land" in first.stdout and f"fks forge land {task}" in first.stdout
    assert (repo / f"{task}.txt").read_text() == "the user's own, untracked\n"
    status = forge(repo, env, "status")
    assert f"fks forge land {task}" in status.stdout, status.output
    header, row = status.stdout.splitlines()[:2]
    assert "ATTEMPTS" in header and "$ " not in row, status.output  # costs read `$0.0000`
    assert re.search(r" \$\d+\.\d{4}  ", row), status.output
    (repo / f"{task}.txt").unlink()
    again = forge(repo, env, "run")
    assert again.code == 0, again.output
    assert calls(env) == Counter({(task, s): 1 for s in STAGES})  # no agent ran again
    assert (repo / f"{task}.txt").read_text().startswith("done by")
    shown = item(repo, task)
    assert shown["status"] == "Done" and [i["status"] for i in shown["items"]] == ["completed"]


def test_land_lands_only_an_approved_branch(repo: Path, env: dict[str, str]) -> None:
    task, other = create(repo, "blocked"), create(repo, "unrun")
    refused = forge(repo, env, "land", other)
    assert refused.code == 2 and "has no approved branch to land" in refused.stderr
    (repo / f"{task}.txt").write_text("in the way\n")
    assert forge(repo, env, "run", task).code == 1
    still = forge(repo, env, "land", task)
    assert still.code == 1 and "could not land" in still.stdout, still.output
    assert still.stdout.count("kept") == 1, still.output  # the branch, said once
    (repo / f"{task}.txt").unlink()
    landed = forge(repo, env, "land", task)
    assert landed.code == 0, landed.output
    assert git(repo, "log", "-1", "--format=%s", "main") == f"implement {task}"
    assert calls(env) == Counter({(task, s): 1 for s in STAGES})
    again = forge(repo, env, "land", task)
    assert again.code == 2 and "already landed" in again.stderr


def test_retry_goes_on_from_the_rejection_and_reset_starts_anew(
    repo: Path, env: dict[str, str]
) -> None:
    write_config(repo, {"forge": {"maxReviewRetries": 0}})
    task = create(repo, "picky")
    rejected = forge(repo, {**env, "FAKE_REJECT": "1"}, "run")
    assert rejected.code == 1 and "rejected after 1 attempt" in rejected.stdout
    retried = forge(repo, env, "retry", task)
    assert retried.code == 0, retried.output
    assert calls(env) == Counter(
        {(task, "analyze"): 1, (task, "implement"): 2, (task, "review"): 2}
    )
    reset = forge(repo, env, "reset", task)
    assert reset.code == 0 and "starts it from Analyze" in reset.stdout, reset.output
    assert item(repo, task)["status"] == "To Do"
    assert forge(repo, env, "run").code == 0
    assert calls(env)[(task, "analyze")] == 2
    assert forge(repo, env, "retry", task).code == 2  # landed: nothing to retry


def test_show_tells_a_tasks_history_and_never_what_an_agent_hides_in_it(
    repo: Path, env: dict[str, str]
) -> None:
    task = create(repo, "shown")
    (repo / f"{task}.txt").write_text("in the way\n")
    subject = "fix \x1b[2J\x1b]0;pwned\x07it \u202etxt.exe\n[fks] Landed on 'main'"
    assert forge(repo, {**env, "FAKE_SUBJECT": subject}, "run").code == 1
    shown = forge(repo, env, "show", task)
    assert shown.code == 0, shown.output
    text = shown.stdout
    assert f"{task}: shown (forge-tasks: Blocked)" in text
    assert "#1 failed at integrate: 1 attempt, 0 retries, $0.0300" in text
    # Times as fks runs and fks show write them: local, to the second, no ISO 'T' or offset.
    assert re.search(r", \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n", text), text
    for stage in STAGES:
        assert f"  {stage} " in text
    assert "result: could not land" in text
    assert "    commit " in text and "fix it <U+202E>txt.exe [fks] Landed on 'main'" in text
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert not any(line.startswith("[fks]") for line in text.splitlines())


@pytest.mark.docker
def test_task_statuses_left_by_forge_never_block_the_next_sandboxed_run(
    repo: Path, env: dict[str, str]
) -> None:
    create(repo, "status")
    assert forge(repo, env, "run").code == 0
    assert git(repo, "status", "--porcelain", "--untracked-files=no").startswith(
        "M forge/tasks/task-"
    )
    done = fks("run", "--sandbox", "--dry-run", "claude", cwd=repo, env=env)
    assert done.code == 0, done.output
    (repo / "README.md").write_text("the user's change\n")  # anything else still blocks
    done = fks("run", "--sandbox", "--dry-run", "claude", cwd=repo, env=env)
    assert done.code == 2 and "uncommitted changes to tracked files" in done.stderr


def test_forge_and_a_chain_on_the_same_base_exclude_each_other(
    repo: Path, env: dict[str, str]
) -> None:
    from sandbox_runner.records.lock import run_lock

    task = create(repo, "exclusive")
    with run_lock(repo, "main", run_label="chain") as chain:  # as `fks run --sandbox` holds it
        chain.set_run("20990101-000000-beef")
        refused = forge(repo, env, "run")
    assert refused.code == 2, refused.output
    assert "run 20990101-000000-beef" in refused.stderr and "base branch 'main'" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not (repo / ".forge" / "work").exists() and calls(env) == Counter()
    state = Path(env["FAKE_STATE"])
    running = start(repo, {**env, "FAKE_HOLD": f"review:{task}"})
    wait_for(state / "held", running)
    in_place = fks("run", "claude", cwd=repo, env=env)  # a chain in the checkout of 'main'
    (state / "go").write_text("")
    out, _ = running.communicate(timeout=300)
    assert running.returncode == 0, out
    assert in_place.code == 2, in_place.output
    assert "is already running on" in in_place.stderr
    assert calls(env)[("?", "other")] == 0


def test_an_interrupted_task_shows_as_interrupted_everywhere(
    repo: Path, env: dict[str, str]
) -> None:
    import signal

    task = create(repo, "stopped")
    state = Path(env["FAKE_STATE"])
    running = start(repo, {**env, "FAKE_HOLD": f"review:{task}"})
    wait_for(state / "held", running)
    running.send_signal(signal.SIGINT)
    out, _ = running.communicate(timeout=300)
    assert running.returncode == 130, out
    assert f"{task} interrupted during review" in out
    status = forge(repo, env, "status")
    (row,) = [line for line in status.stdout.splitlines() if line.startswith(task)]
    assert row.split()[1:3] == ["interrupted", "review"], status.stdout
    runs = fks("runs", cwd=repo)
    (line,) = [line for line in runs.stdout.splitlines() if f"forge {task}" in line]
    assert "interrupted" in line and "incomplete" not in line, runs.stdout
    assert item(repo, task)["items"][0]["status"] == "interrupted"
    resumed = forge(repo, env, "run", "--resume")
    assert resumed.code == 0, resumed.output
    assert calls(env)[(task, "analyze")] == 1 and calls(env)[(task, "review")] == 2


def test_a_task_whose_dependency_lands_during_the_run_is_taken_by_it(
    repo: Path, env: dict[str, str]
) -> None:
    first = create(repo, "first")
    done = fks("tasks", "create", "second", "--depends-on", first, cwd=repo)
    assert done.code == 0, done.output
    second = done.stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second")
    ran = forge(repo, env, "run", "--parallel", "2")
    assert ran.code == 0, ran.output
    assert calls(env) == Counter({(t, s): 1 for t in (first, second) for s in STAGES})
    assert f"[fks] {second} landed" in ran.stdout


def test_a_task_file_broken_during_the_run_costs_only_itself(
    repo: Path, env: dict[str, str]
) -> None:
    task = create(repo, "only")
    state = Path(env["FAKE_STATE"])
    running = start(repo, {**env, "FAKE_HOLD": f"review:{task}"}, "--parallel", "2")
    wait_for(state / "held", running)
    (repo / "forge" / "tasks" / "task-zzzzzz - broken.md").write_text("---\nid: [\n---\n")
    (state / "go").write_text("")
    out, _ = running.communicate(timeout=300)
    assert running.returncode == 0, out
    assert f"[fks] {task} landed" in out
    assert "Traceback" not in out and "internal error" not in out


def test_a_resumed_run_prints_and_budgets_what_it_spent_itself(
    repo: Path, env: dict[str, str]
) -> None:
    """Each fake stage costs $0.01: the first run spends $0.02 (analyze, implement) and is
    stopped in review; the resumed run spends $0.01 on the review, and says so."""
    import signal

    task = create(repo, "resumed")
    state = Path(env["FAKE_STATE"])
    running = start(repo, {**env, "FAKE_HOLD": f"review:{task}"})
    wait_for(state / "held", running)
    running.send_signal(signal.SIGINT)
    out, _ = running.communicate(timeout=300)
    assert running.returncode == 130, out
    assert "[fks] Cost of this run $0.0200\n" in out, out
    # --max-cost counts this run's spending only: the earlier $0.02 does not stop it.
    resumed = forge(repo, env, "run", "--resume", "--max-cost", "0.015", "--json")
    assert resumed.code == 0, resumed.output
    assert f"{task} landed (" in resumed.stderr
    assert "$0.0100 this run ($0.0300 in all)" in resumed.stderr, resumed.stderr
    assert (
        "[fks] Cost of this run $0.0100 (with earlier runs of these tasks: $0.0300)\n"
        in resumed.stderr
    )
    data = json.loads(resumed.stdout)
    assert (data["cost_usd"], data["tasks_cost_usd"]) == (0.01, 0.03)
    (shown,) = data["tasks"]
    assert (shown["session_cost_usd"], shown["cost_usd"]) == (0.01, 0.03)
    assert calls(env)[(task, "review")] == 2


def test_show_tells_the_question_asked_and_the_answer_given(
    repo: Path, env: dict[str, str]
) -> None:
    task = create(repo, "clarified")
    asking = {**env, "FAKE_ASK": "1"}
    first = forge(repo, asking, "run")
    assert first.code == 1 and "Needs a clarification: Red or blue?" in first.stdout, first.output
    shown = forge(repo, env, "show", task).stdout
    assert "#1 waiting for an answer: 0 attempts" in shown, shown
    assert "  question: Red or blue?\n" in shown
    assert f'  answer: none yet (fks forge answer {task} "...")\n' in shown
    (architect,) = [line for line in shown.splitlines() if line.startswith("    architect")]
    assert "asked a question $0.0100" in architect and "complete" not in architect, shown

    assert forge(repo, env, "answer", task, "Blue,\nalways.").code == 0
    landed = forge(repo, asking, "run")
    assert landed.code == 0, landed.output
    shown = forge(repo, env, "show", task).stdout
    assert "#1 landed (" in shown and "completed at done" not in shown, shown
    assert "  question: Red or blue?\n" in shown and "  answer: Blue, / always.\n" in shown
    passes = [line.split()[1:3] for line in shown.splitlines() if line.startswith("    ")]
    assert [words for words in passes if words[0] in ("asked", "resolved", "approved")] == [
        ["asked", "a"],
        ["resolved", "$0.0100"],
        ["approved", "$0.0100"],
    ], shown
    data = item(repo, task)["items"][0]
    assert (data["question"], data["answer"], data["state"]) == (
        "Red or blue?",
        "Blue,\nalways.",
        "landed",
    )
    answered = [s["answered"] for s in data["stages"] if s["stage"] in ("architect", "review")]
    assert answered == ["asked a question", "resolved", "approved"]


def test_modules_at_the_top_of_the_repository_never_run_in_a_worker(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A repository whose top holds `inspect.py`, `sandbox_runner/__init__.py`, … (as a cloned
    repository or a landed task may): the workers `fks forge run` starts there import none of
    them, and the task lands."""
    markers = tmp_path / "markers"
    markers.mkdir()
    for name, text in module_payloads(markers).items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "modules at the top")
    task = create(repo, "modules")
    done = fks("forge", "run", cwd=repo, env=env, timeout=300)
    assert done.code == 0, done.output
    assert (repo / f"{task}.txt").is_file()
    assert sorted(p.name for p in markers.iterdir()) == []
