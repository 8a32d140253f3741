"""What an agent can land in `forge/tasks/` and `.forge/` costs at most its own task: a task file
fks cannot use is named in one line and skipped, and fks never writes through a link."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, Request, isolated_environ
from fks_testing.helpers import FKS, git, init_repo, write_config

needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="needs the claude CLI")


def forge_repo(tmp_path: Path) -> Path:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(repo, {"forge": {"maxReviewRetries": 0, "maxTurns": 3}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    return repo


def create(repo: Path, title: str) -> str:
    done = subprocess.run(
        [FKS, "forge", "create", title], cwd=repo, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()[-1]


def no_plan(request: Request) -> Any:
    """Every analyst answers in words only: each task that runs fails at Analyze."""
    return [{"text": "I cannot plan this."}]


def forge_run(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    with FakeAnthropic(responder=no_plan) as fake:
        return subprocess.run(
            [FKS, "forge", "run", *args],
            cwd=repo,
            env=isolated_environ(fake.env(tmp_path / "claude-config")),
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )


@needs_claude
@pytest.mark.claude
@pytest.mark.timeout(300)
def test_a_task_file_with_an_overlong_id_is_skipped_and_the_others_run(tmp_path: Path) -> None:
    repo = forge_repo(tmp_path)
    good = create(repo, "good")
    text = next((repo / "forge" / "tasks").glob("task-*.md")).read_text()
    bad_id = "TASK-" + "a" * 250
    (repo / "forge" / "tasks" / "task-zz - bad.md").write_text(text.replace(good, bad_id))
    hostile = "task-zy - \x1b]0;pwned\x07\u202ebad.md"  # a window title, a bidi override
    (repo / "forge" / "tasks" / hostile).write_text("no front matter")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    done = forge_run(repo, tmp_path, "--json")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if "task-zz - bad.md" in line]
    assert len(warnings) == 1 and "is not a task id" in warnings[0], done.stderr[-2000:]
    assert "skipped" in warnings[0] and len(warnings[0]) < 400
    (shown,) = [line for line in done.stderr.splitlines() if "task-zy" in line]
    assert "task-zy - <U+202E>bad.md" in shown and "\x1b" not in shown and "\u202e" not in shown
    (task,) = json.loads(done.stdout)["tasks"]
    assert (task["task"], task["status"]) == (good, "failed"), task  # the good one ran
    assert [p.name for p in (repo / ".forge" / "work").iterdir()] == [f"{good}-001.yaml"]
    assert git(repo, "branch", "--list", "fks/forge/*") == f"fks/forge/{good}"


@pytest.mark.timeout(120)
def test_a_run_on_a_branch_named_like_an_fks_lock_does_not_block_forge(tmp_path: Path) -> None:
    """A chain on base `forge-work` (or `forge-merge`, `_in-place`) holds its branch's lock;
    `fks forge answer`, which takes the work store's lock, still answers at once."""
    from sandbox_runner.records.lock import run_lock

    repo = forge_repo(tmp_path)
    task = create(repo, "something")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "task")
    for branch in ("forge-work", "forge-merge", "_in-place"):
        git(repo, "branch", branch)
    with (
        run_lock(repo, "forge-work", run_label="chain"),
        run_lock(repo, "forge-merge", run_label="chain"),
        run_lock(repo, "_in-place", run_label="chain"),
        run_lock(repo, None, run_label="in place"),  # a different lock from `_in-place`'s
    ):
        done = subprocess.run(
            [FKS, "forge", "answer", task, "yes"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=90,  # before: it waited for the chain, however long that ran
            check=False,
        )
    assert done.returncode == 2 and "has no open question" in done.stderr, done.stderr
    locks = repo / ".forge" / "locks"
    assert len(list((locks / "branches").iterdir())) == 3


def test_branches_whose_names_differ_only_in_punctuation_have_their_own_locks(
    tmp_path: Path,
) -> None:
    from sandbox_runner.records.lock import run_lock

    repo = forge_repo(tmp_path)
    long = "feature/" + "x" * 240
    with (
        run_lock(repo, "a/b", run_label="one"),
        run_lock(repo, long, run_label="two"),
        run_lock(repo, "a_b", run_label="three"),  # before: "already running on a/b"
    ):
        assert len(list((repo / ".forge" / "locks" / "branches").iterdir())) == 3


# --- links in the checkout -------------------------------------------------------------------------


def land_link(repo: Path, name: str, target: Path) -> None:
    """What a merged step leaves: `name` committed as a symlink to a host path."""
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).symlink_to(target)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"{name} is a link")


@pytest.mark.parametrize("link", ["forge/tasks", "forge"])
@pytest.mark.parametrize("command", [["forge", "create", "x"], ["tasks", "create", "x"]])
def test_fks_never_writes_task_files_through_a_link(
    tmp_path: Path, link: str, command: list[str]
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    land_link(repo, link, outside)
    done = subprocess.run([FKS, *command], cwd=repo, capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "link" in lines[0] and "Traceback" not in done.stderr, lines
    assert list(outside.iterdir()) == []


def test_a_task_file_that_is_a_link_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    task = create(repo, "real")
    secret = tmp_path / "secret.md"
    real = next((repo / "forge" / "tasks").glob("task-*.md"))
    secret.write_text(real.read_text().replace(task, "TASK-zzzzzz").replace("real", "SECRET"))
    (repo / "forge" / "tasks" / "task-zzzzzz - link.md").symlink_to(secret)
    listed = subprocess.run([FKS, "tasks", "list"], cwd=repo, capture_output=True, text=True)
    assert listed.returncode == 0 and "SECRET" not in listed.stdout + listed.stderr
    assert "task-zzzzzz - link.md is a symlink" in listed.stderr
    before = secret.read_text()
    done = subprocess.run(
        [FKS, "tasks", "edit", "TASK-zzzzzz", "--status", "done"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and secret.read_text() == before


# --- task files nested or aliased past any use -------------------------------------------------------

FAKE_CLAUDE = Path(__file__).parents[1] / "agents" / "fake_claude.py"
FORGE_TASKS = str(Path(FKS).with_name("forge-tasks"))


def fake_claude_env(tmp_path: Path) -> dict[str, str]:
    """The forge agents played by tests/agents/fake_claude.py: every task lands."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(FAKE_CLAUDE)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_STATE": str(tmp_path)}


def deep_task(task_id: str, depth: int) -> str:
    return (
        f"---\nid: {task_id}\ntitle: deep\nlabels: {'[' * depth}{']' * depth}\n"
        "created: 2025-01-02\nupdated: 2025-01-02\n---\n\n## Description\n\nnested\n"
    )


LAUGHS = "".join(
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10)
)  # nine levels of nine aliases: 9**9 values once expanded


def test_a_task_file_nested_3000_deep_is_named_and_skipped_everywhere(tmp_path: Path) -> None:
    repo = forge_repo(tmp_path)
    good = create(repo, "good")
    tasks = repo / "forge" / "tasks"
    (tasks / "task-zzdeep - deep.md").write_text(deep_task("TASK-zzdeep", 3000))
    bomb = deep_task("TASK-zzlol", 1).replace("labels: []\n", f"l0: &l0 x\n{LAUGHS}labels: *l9\n")
    (tasks / "task-zzlol - laughs.md").write_text(bomb)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks as a landed commit adds them")

    listed = subprocess.run([FORGE_TASKS, "list"], cwd=repo, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert good in listed.stdout and "deep" not in listed.stdout
    for name, why in (("task-zzdeep - deep.md", "nested deeper"), ("task-zzlol", "values")):
        (line,) = [line for line in listed.stderr.splitlines() if name in line]
        assert why in line and "skipped" in line and len(line) < 400, line
    viewed = subprocess.run([FORGE_TASKS, "view", good], cwd=repo, capture_output=True, text=True)
    assert viewed.returncode == 0 and "good" in viewed.stdout, viewed.stderr[-2000:]

    ran = subprocess.run(
        [FKS, "forge", "run"],
        cwd=repo,
        env=fake_claude_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out[-3000:]
    assert "internal error" not in out and "Traceback" not in out
    (warning,) = [line for line in out.splitlines() if "task-zzdeep - deep.md" in line]
    assert "nested deeper than" in warning and "skipped" in warning and len(warning) < 400
    assert f"[fks] {good} landed" in ran.stdout

    from starlette.testclient import TestClient

    from sandbox_runner.web.app import create_app
    from sandbox_runner.web.security import Guard
    from sandbox_runner.web.sources import Sources

    app = create_app(
        Sources([repo]),
        Guard(token="deep-yaml-token-0123456789", port=48214, name="fks-test.localhost"),
    )
    with TestClient(app, base_url="http://fks-test.localhost:48214") as client:
        assert client.get("/?token=deep-yaml-token-0123456789").status_code == 200
        page = client.get("/forge")
    assert page.status_code == 200, page.text[-2000:]
    assert good in page.text and "task-zzdeep - deep.md" in page.text
    assert page.text.count("nested deeper than") == 1
