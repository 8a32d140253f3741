"""Runs you can trust overnight: records, kill -9 then clean and resume, breakers, lock, masking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fks_testing.helpers import eventually_none, fks, git, init_repo, write_config
from fks_testing.sandboxed import RUNTIMES, runtime_args


def records(project: Path) -> list[dict]:
    """Run records, oldest first (by start time: ids only have one-second resolution)."""
    runs = project / ".forge" / "runs"
    # A run's folder is made before its record is written (whole, by a rename) into it.
    written = [d / "run.json" for d in runs.iterdir()] if runs.exists() else []
    found = [json.loads(path.read_text()) for path in written if path.exists()]
    return sorted(found, key=lambda r: r["started"])


def start(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sandbox_runner", "run", *args],
        cwd=project,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_containers(run_id: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=fks.run={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


def run_volumes(run_id: str) -> list[str]:
    return subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"label=fks.run={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


def wait_until(predicate, timeout: float = 240, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def script(project: Path, name: str, body: str) -> str:
    path = project / name
    path.write_text(body)
    path.chmod(0o755)
    return f"./{name}"


# --- records -------------------------------------------------------------------------------------


def test_records_after_success_and_failure(project: Path) -> None:
    agent = script(
        project,
        "a.sh",
        "#!/bin/sh\necho out-line\necho err-line >&2\n[ -e done ] && echo FORKHESTRA_COMPLETE\ntouch done\n",
    )
    assert fks("run", f"{agent}:3").code == 0
    assert fks("run", "fake:2", env={"FAKE_MARKER_AT": "0"}).code == 1
    ok, failed = records(project)
    assert ok["status"] == "complete" and ok["failed_at"] is None
    (step,) = ok["steps"]
    assert [it["marker"] for it in step["iterations"]] == [False, True]
    assert [it["reason"] for it in step["iterations"]] == ["no_marker", "marker"]
    first_log = project / ".forge" / "runs" / ok["id"] / step["iterations"][0]["log"]
    assert "out-line" in first_log.read_text() and "err-line" in first_log.read_text()
    assert all(it["started"] and it["ended"] and it["exit_code"] == 0 for it in step["iterations"])
    assert failed["status"] == "incomplete" and failed["failed_at"] == 1
    assert failed["steps"][0]["reason"] == "max_iterations"
    assert failed["options"]["dsl"] == "fake:2"


# --- kill -9, clean, resume ------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_kill_9_then_clean_then_resume(tmp_path: Path, runtime: str) -> None:
    """Also under gVisor: the killed run's workspace says its runtime, and `fks clean` exports
    it under that runtime."""
    repo = init_repo(tmp_path / "repo")
    agent = (
        "#!/bin/sh\n"
        "n=$(ls step-*.txt 2>/dev/null | wc -l); n=$((n+1))\n"
        'echo "before commit $n"\n'
        'echo $n > step-$n.txt && git add step-$n.txt && git commit -qm "work $n"\n'
        "if [ $n -ge 2 ]; then echo FORKHESTRA_COMPLETE; exit 0; fi\n"
        "echo 'sleeping now'\nsleep 300\n"
    )
    (repo / "agent.sh").write_text(agent)
    (repo / "agent.sh").chmod(0o755)
    write_config(
        repo, {"sandbox": {"timeout": 60}}
    )  # a lost commit would make it sleep: fail, don't hang
    git(repo, "add", "agent.sh", "forge")
    git(repo, "commit", "-qm", "agent")
    proc = start(repo, "./agent.sh:4", "--sandbox", *runtime_args(runtime))
    runs = repo / ".forge" / "runs"

    def sleeping() -> bool:
        logs = list(runs.glob("*/01-*/001.log")) if runs.exists() else []
        return bool(logs) and "sleeping now" in logs[0].read_text()

    wait_until(sleeping, what="the agent to be mid-iteration")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    (rec,) = records(repo)
    run_id = rec["id"]
    log = (runs / run_id / rec["steps"][0]["iterations"][0]["log"]).read_text()
    assert "before commit 1" in log and "sleeping now" in log  # output up to the kill is on disk
    assert rec["status"] == "running"  # nobody could write otherwise
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=fks.run={run_id}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert left, "the killed run's container is still there before clean"
    volume = rec["steps"][0]["workspace"]
    labels = json.loads(
        subprocess.run(
            ["docker", "volume", "inspect", "--format", "{{json .Labels}}", volume],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert labels.get("fks.runtime") == (None if runtime == "runc" else runtime)

    assert fks("runs", cwd=repo).stdout.count("died") == 1
    res = fks("clean", cwd=repo)
    assert res.code == 0, res.output
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=fks.run={run_id}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert left == [] and run_volumes(run_id) == []
    branch = rec["steps"][0]["branch"]
    assert f"saved to {branch} the commits run {run_id} had not saved" in res.stdout  # commit 1
    assert git(repo, "log", "-1", "--format=%s", rec["steps"][0]["branch"]) == "work 1"
    assert git(repo, "status", "--porcelain") == ""

    res = fks("run", "--resume", "last", "--more", "1", cwd=repo, timeout=240)
    assert res.code == 0, res.output
    assert "(resumed)" in res.stdout
    (rec,) = records(repo)  # the same record, appended to
    assert rec["id"] == run_id and rec["status"] == "complete"
    step = rec["steps"][0]
    assert step["merged"] is True
    numbers = [it["number"] for it in step["iterations"] if it["counted"]]
    assert numbers == sorted(numbers) and numbers[0] == 1 and len(numbers) >= 2  # kept counting
    assert (repo / "step-1.txt").exists()  # the commit made before the kill landed too
    assert [it["number"] for it in step["iterations"]] == [1, 2]  # the killed iteration counted
    assert step["iterations"][0]["reason"] == "killed"


@pytest.mark.docker
def test_resume_right_after_kill_9_keeps_unsaved_commits(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / "agent.sh").write_text(
        "#!/bin/sh\nif [ -e first.txt ]; then echo FORKHESTRA_COMPLETE; exit 0; fi\n"
        "echo 1 > first.txt && git add first.txt && git commit -qm first\necho 'sleeping now'\nsleep 300\n"
    )
    (repo / "agent.sh").chmod(0o755)
    write_config(repo, {"sandbox": {"timeout": 60}})
    git(repo, "add", "agent.sh", "forge")
    git(repo, "commit", "-qm", "agent")
    proc = start(repo, "./agent.sh:3", "--sandbox")
    runs = repo / ".forge" / "runs"
    wait_until(
        lambda: any("sleeping now" in p.read_text() for p in runs.glob("*/01-*/001.log")),
        what="mid-iteration",
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    (rec,) = records(repo)
    killed = run_containers(rec["id"])
    assert killed, "the killed run's container is still there"
    res = fks("run", "--resume", "last", cwd=repo, timeout=240)
    assert res.code == 0, res.output
    assert "Kept the commits the killed run had not saved yet" in res.stdout
    assert git(repo, "log", "--format=%s", "-3", "main").splitlines()[0] == "first"
    # The killed run's container was stopped and removed first; nothing of the run is left.
    assert run_containers(rec["id"]) == []
    eventually_none(lambda: run_volumes(rec["id"]), "the workspace")


@pytest.mark.docker
def test_clean_branches_and_old_records(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / "done.sh").write_text(
        "#!/bin/sh\necho d > d.txt && git add d.txt && git commit -qm d\necho FORKHESTRA_COMPLETE\n"
    )
    (repo / "half.sh").write_text(
        "#!/bin/sh\necho h > h.txt && git add h.txt && git commit -qm h\n"
    )
    for name in ("done.sh", "half.sh"):
        (repo / name).chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "agents")
    assert fks("run", "./done.sh:1 -> ./half.sh:1", "--sandbox", cwd=repo).code == 1
    (rec,) = records(repo)
    merged, unmerged = rec["steps"][0]["branch"], rec["steps"][1]["branch"]
    res = fks("clean", "--branches", cwd=repo)
    assert res.code == 0 and f"deleted branch {merged}" in res.stdout
    branches = git(repo, "branch", "--format=%(refname:short)").split()
    assert merged not in branches and unmerged in branches  # unmerged work is never deleted
    assert (
        fks("clean", "--older-than", "1", cwd=repo).stdout.strip() == "fks clean: nothing to remove"
    )
    res = fks("clean", "--older-than", "0", cwd=repo)
    assert f"deleted run record {rec['id']}" in res.stdout
    assert records(repo) == []
    assert fks("clean", "--older-than", "-1", cwd=repo).code == 2


def test_resume_local_incomplete_run_with_more(project: Path) -> None:
    res = fks("run", "fake:2", env={"FAKE_MARKER_AT": "4"})
    assert res.code == 1
    res = fks("run", "--resume", "last", env={"FAKE_MARKER_AT": "4"})
    assert res.code == 2  # still at its maximum: no iteration left, nothing runs
    assert "has used all its 2 iterations" in res.stderr and "--more N" in res.stderr
    res = fks("run", "--resume", "last", "--more", "3", env={"FAKE_MARKER_AT": "4"})
    assert res.code == 0, res.output
    assert "Iteration 3/5" in res.stdout and "Iteration 4/5" in res.stdout
    (rec,) = records(project)
    assert [it["number"] for it in rec["steps"][0]["iterations"]] == [1, 2, 3, 4]
    res = fks("run", "--resume", "last")
    assert res.code == 2 and "complete; there is nothing to resume" in res.stderr


def test_resume_refuses_options_it_cannot_change(project: Path) -> None:
    assert fks("run", "fake:1", env={"FAKE_MARKER_AT": "0"}).code == 1
    res = fks("run", "--resume", "last", "-p", "new prompt")
    assert res.code == 2 and "--prompt cannot be changed" in res.stderr
    res = fks("run", "--resume", "last", "fake:3")
    assert res.code == 2 and "give no DSL" in res.stderr


def test_resume_skips_finished_steps(project: Path) -> None:
    res = fks("run", "planner -> builder:1", env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1
    res = fks("run", "--resume", "last", "--more", "1", env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1
    assert "Running: planner" not in res.stdout and "Starting: builder" in res.stdout


def test_resume_refuses_changed_chain(project: Path) -> None:
    write_config(project, {"chains": {"c": {"steps": [{"agent": "fake", "iterations": 1}]}}})
    assert fks("run", "--chain", "c", env={"FAKE_MARKER_AT": "0"}).code == 1
    write_config(project, {"chains": {"c": {"steps": [{"agent": "builder", "iterations": 1}]}}})
    res = fks("run", "--resume", "last")
    assert res.code == 2 and "the chain changed" in res.stderr


# --- breakers ----------------------------------------------------------------------------------------


def test_no_progress_breaker(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    res = fks("run", "fake:10", cwd=repo, env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1
    (rec,) = records(repo)
    step = rec["steps"][0]
    assert step["reason"] == "no_progress"
    assert len(step["iterations"]) == 3
    assert all(it["changed"] is False for it in step["iterations"])
    assert "no_progress" in res.stdout


def test_progress_keeps_the_loop_going(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    res = fks("run", "fake:5", cwd=repo, env={"FAKE_MARKER_AT": "5", "FAKE_TOUCH": "1"})
    assert res.code == 0, res.output
    (rec,) = records(repo)
    assert [it["changed"] for it in rec["steps"][0]["iterations"]] == [True] * 5


def test_breaker_limit_is_configurable(tmp_path: Path, project: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    write_config(
        repo,
        {
            "noProgressLimit": 0,
            "chains": {"c": {"noProgressLimit": 5, "steps": [{"agent": "fake", "iterations": 9}]}},
        },
    )
    assert fks("run", "fake:4", cwd=repo, env={"FAKE_MARKER_AT": "0"}).code == 1
    assert len(records(repo)[0]["steps"][0]["iterations"]) == 4  # 0 = never
    assert fks("run", "--chain", "c", cwd=repo, env={"FAKE_MARKER_AT": "0"}).code == 1
    assert len(records(repo)[1]["steps"][0]["iterations"]) == 5


def test_repeated_error_breaker(project: Path) -> None:
    res = fks(
        "run",
        "fake:10",
        env={"FAKE_MARKER_AT": "0", "FAKE_EXIT": "3", "FAKE_STDERR": "fatal: same thing broke"},
    )
    assert res.code == 1
    (rec,) = records(project)
    step = rec["steps"][0]
    assert step["reason"] == "repeated_error" and len(step["iterations"]) == 3
    assert "repeated_error" in res.stdout


# --- lock --------------------------------------------------------------------------------------------


def test_second_run_on_same_base_fails_fast_and_stale_lock_is_reclaimed(
    tmp_path: Path, project: Path
) -> None:
    repo = init_repo(tmp_path / "repo")
    first = start(repo, "fake:3", env={"FAKE_MARKER_AT": "0", "FAKE_SLEEP": "60"})
    try:
        wait_until(
            lambda: bool(records(repo)) and records(repo)[0]["steps"][0]["iterations"],
            what="first run",
        )
        run_id = records(repo)[0]["id"]
        started = time.monotonic()
        res = fks("run", "fake:1", cwd=repo)
        assert time.monotonic() - started < 30  # not the first run's 60 s iteration
        assert res.code == 2
        assert run_id in res.stderr and "already running" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        os.kill(first.pid, signal.SIGKILL)  # leaves a stale lock file behind
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    res = fks("run", "fake:1", cwd=repo)
    assert res.code == 0, res.output
    assert f"Reclaimed the lock of run {run_id}" in res.stdout


# --- masking -----------------------------------------------------------------------------------------


def test_secrets_are_masked_everywhere(project: Path) -> None:
    secret = "sk-ant-api03-" + "q" * 40
    agent = script(
        project,
        "leak.sh",
        '#!/bin/sh\necho "key is $ANTHROPIC_API_KEY"\necho "again:$ANTHROPIC_API_KEY" >&2\nexit 1\n',
    )
    res = fks("run", f"{agent}:1", "--json", env={"ANTHROPIC_API_KEY": secret})
    assert secret not in res.stdout + res.stderr
    assert "key is ********" in res.stderr  # agent output goes to stderr under --json
    for path in (project / ".forge").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_resume_uses_the_count_of_the_step_it_continues(project: Path) -> None:
    """The same agent twice with different counts (a:1 -> b -> a:3): a resume of the third
    step continues to its own maximum, not the first one's."""
    agent = script(
        project,
        "a.sh",
        "#!/bin/sh\nn=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\n"
        '[ "$n" -eq 1 ] && echo FORKHESTRA_COMPLETE; true\n',
    )
    other = script(project, "b.sh", "#!/bin/sh\ntrue\n")
    res = fks("run", f"{agent}:1 -> {other} -> {agent}:3")
    assert res.code == 1 and "Iteration 3/3" in res.stdout, res.output
    res = fks("run", "--resume", "last", "--more", "1")
    assert "Iteration 4/4" in res.stdout, res.output


# --- duration of a resumed run ---------------------------------------------------------------


GAP = 4.0
"""Seconds between a run's sessions: more than both of them take together."""


def _seconds(shown: str) -> float:
    """`2.5s` (a duration under a minute, as fks prints it) in seconds."""
    assert shown.endswith("s") and "m" not in shown, shown
    return float(shown.removesuffix("s"))


def _durations(project: Path) -> tuple[float, float]:
    """The last run's duration as `fks show` and `fks runs` print it."""
    shown = fks("show", "last", cwd=project)
    (line,) = [x for x in shown.stdout.splitlines() if x.strip().startswith("duration:")]
    table = fks("runs", cwd=project, env={"COLUMNS": "200"})
    row = [x for x in table.stdout.splitlines() if records(project)[-1]["id"] in x]
    return _seconds(line.split()[-1]), _seconds(row[0].split()[4])


@pytest.mark.parametrize("first_session", ["incomplete", "killed"])
def test_a_resumed_runs_duration_is_the_time_it_ran(project: Path, first_session: str) -> None:
    init_repo(project)
    if first_session == "incomplete":
        res = fks("run", "fake:1", cwd=project, env={"FAKE_MARKER_AT": "2"})
        assert res.code == 1, res.output
    else:  # its process dies during an iteration, saying nothing
        first = start(project, "fake:3", env={"FAKE_MARKER_AT": "0", "FAKE_SLEEP": "2"})
        wait_until(lambda: bool(records(project)) and records(project)[0]["steps"][0]["iterations"])
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    time.sleep(GAP)
    res = fks("run", "--resume", "last", "--more", "1", cwd=project, env={"FAKE_MARKER_AT": "2"})
    assert res.code == 0, res.output
    assert records(project)[-1]["status"] == "complete"
    show, listed = _durations(project)
    assert show < GAP - 1 and listed < GAP - 1, (show, listed)
