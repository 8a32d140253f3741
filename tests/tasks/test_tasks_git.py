"""forge-tasks under concurrency: the writer lock, and tasks created on two git branches then merged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox_runner.tasks.store import TaskStore

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def forge_tasks(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "FORGE_TASKS_ROOT"}
    result = subprocess.run(
        [sys.executable, "-m", "sandbox_runner.tasks.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=Forge Test", "-c", "user.email=forge@example.com", *args],
        cwd=repo,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=False,
    )


def git_ok(repo: Path, *args: str) -> str:
    result = git(repo, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def listed(repo: Path) -> list[dict[str, object]]:
    rows = json.loads(forge_tasks(repo, "list", "--json"))
    assert isinstance(rows, list)
    return rows


def _in_parallel(root: Path, code: str, workers: int) -> None:
    """Run `code` (with `n` = worker number) in `workers` processes at once; all must succeed."""
    script = "import sys\nfrom sandbox_runner.tasks import commands\nn = int(sys.argv[1])\n" + code
    env = {k: v for k, v in os.environ.items() if k != "FORGE_TASKS_ROOT"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(n)],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


def test_concurrent_creators_lose_nothing(tmp_path: Path) -> None:
    (tmp_path / "forge").mkdir()
    _in_parallel(
        tmp_path,
        "for i in range(25):\n    commands.create(root=None, title=f'worker {n} task {i}')\n",
        workers=4,
    )
    rows = listed(tmp_path)
    assert len(rows) == 100
    assert len({row["id"] for row in rows}) == 100
    assert len({row["created"] for row in rows}) == 100
    assert {row["title"] for row in rows} == {
        f"worker {n} task {i}" for n in range(4) for i in range(25)
    }
    for n in range(4):  # creation order survives: each worker's tasks list in the order made
        mine = [row["title"] for row in rows if str(row["title"]).startswith(f"worker {n} ")]
        assert mine == [f"worker {n} task {i}" for i in range(25)]


def test_concurrent_editors_of_one_task_lose_no_update(tmp_path: Path) -> None:
    (tmp_path / "forge").mkdir()
    task = forge_tasks(tmp_path, "create", "Shared").split()[1]
    _in_parallel(
        tmp_path,
        "from sandbox_runner.tasks.commands import Changes\n"
        "for i in range(15):\n"
        f"    commands.edit(root=None, task_ref='{task}', changes=Changes(append_notes=f'note {{n}}-{{i}}'))\n",
        workers=4,
    )
    notes = json.loads(forge_tasks(tmp_path, "view", task, "--json"))["notes"].split("\n\n")
    assert sorted(notes) == sorted(f"note {n}-{i}" for n in range(4) for i in range(15))


def _waiting_for_a_lock(pid: int) -> bool:
    """Linux lists a process blocked in flock as `N: -> FLOCK ADVISORY WRITE <pid> …`."""
    return any(
        "->" in fields and str(pid) in fields
        for fields in map(str.split, Path("/proc/locks").read_text().splitlines())
    )


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_a_writer_waits_while_another_holds_the_lock(tmp_path: Path) -> None:
    (tmp_path / "forge").mkdir()
    store = TaskStore(tmp_path)
    with store.locked():
        proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox_runner.tasks.cli", "create", "Waits"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 240
        while not _waiting_for_a_lock(proc.pid):
            assert proc.poll() is None, "the writer finished while the lock was held"
            assert time.monotonic() < deadline, "the writer never queued for the lock"
            time.sleep(0.05)
        assert list(store.tasks_dir.glob("task-*.md")) == []
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert out.startswith("Created TASK-")
    assert len(list(store.tasks_dir.glob("task-*.md"))) == 1


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git_ok(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "README.md").write_text("project\n")
    git_ok(tmp_path, "add", "README.md")
    git_ok(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def test_writing_tasks_leaves_only_task_files_for_git(repo: Path) -> None:
    task = forge_tasks(repo, "create", "One").split()[1]
    forge_tasks(repo, "edit", task, "--status", "done")
    untracked = git_ok(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert untracked == [f"?? forge/tasks/{task.lower()}-one.md"]


def test_tasks_created_on_two_branches_merge_without_conflict(repo: Path) -> None:
    base = forge_tasks(repo, "create", "Base task", "-p", "high").split()[1]
    git_ok(repo, "add", "forge")
    git_ok(repo, "commit", "-q", "-m", "base task")

    # Two steps start from the same commit and both plan work, even under the same titles.
    made: dict[str, list[str]] = {}
    for branch in ("step-a", "step-b"):
        git_ok(repo, "checkout", "-q", "-b", branch, "main")
        made[branch] = [
            forge_tasks(repo, "create", title, "--depends-on", base).split()[1]
            for title in ("Write docs", f"Only on {branch}", "Add tests")
        ]
        if branch == "step-a":
            forge_tasks(repo, "edit", base, "--status", "done", "--append-notes", "done on a")
        git_ok(repo, "add", "forge")
        git_ok(repo, "commit", "-q", "-m", f"tasks from {branch}")

    git_ok(repo, "checkout", "-q", "main")
    git_ok(repo, "merge", "-q", "--no-edit", "step-a")
    merged = git(repo, "merge", "--no-edit", "step-b")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "CONFLICT" not in merged.stdout
    assert git_ok(repo, "status", "--porcelain") == ""

    rows = listed(repo)
    expected = {base, *made["step-a"], *made["step-b"]}
    assert len(rows) == 7
    assert {row["id"] for row in rows} == expected
    assert [row["title"] for row in rows].count("Write docs") == 2
    assert {row["id"] for row in rows if row["ready"]} == expected - {base}
    plain = forge_tasks(repo, "list", "--plain").splitlines()
    assert len(plain) == 7
    assert plain[0].startswith(f"{base}  Done")
    for task in expected:  # every id still resolves to exactly one task
        assert json.loads(forge_tasks(repo, "view", task, "--json"))["id"] == task
