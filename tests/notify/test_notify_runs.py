"""Notifications as a user gets them: `notify` in forge/chains.json, `fks run` and `fks forge
run` through the CLI, Apprise posting to a local sink (`json://` and plain-HTTP `ntfy://`).
The agents are a fake `claude` on PATH (tests/agents/fake_claude.py): each call costs $0.01."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config
from fks_testing.notifysink import closed_port, notify_sink

from sandbox_runner.notify.pages import published

FAKE_CLAUDE = Path(__file__).parents[1] / "agents" / "fake_claude.py"
TOKEN = "tok" + "SecretPath7Qx2Lm9Pw4Rt8"
TOPIC = "topicSecret" + "Zk3Vn6Bh1Jd5"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"README.md": "hello\n"})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(FAKE_CLAUDE)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_STATE": str(tmp_path / "fake"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def configure(repo: Path, notify: list[object]) -> None:
    write_config(repo, {"agents": {"worker": {"systemPromptText": "You work."}}, "notify": notify})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fks config")


def record(repo: Path) -> tuple[dict[str, object], str]:
    (path,) = (repo / ".forge" / "runs").glob("*/run.json")
    text = path.read_text()
    return json.loads(text), text


def test_a_run_end_reaches_every_target_and_a_dead_one_only_is_recorded(
    repo: Path, env: dict[str, str]
) -> None:
    with notify_sink() as sink:
        configure(
            repo,
            [
                {"env": "FKS_TEST_HOOK"},
                f"ntfy://127.0.0.1:{sink.port}/{TOPIC}",
                f"json://127.0.0.1:{closed_port()}/dead/{TOKEN}",
            ],
        )
        hook = sink.url("json", f"hook/{TOKEN}")
        done = fks("run", "worker", "-p", "Go.", cwd=repo, env={**env, "FKS_TEST_HOOK": hook})
        assert done.code == 0, done.output
        posts = sink.wait_for(2)
    data, text = record(repo)
    run_id = str(data["id"])
    by_path = {post.path: post for post in posts}
    hooked, ntfy = by_path[f"/hook/{TOKEN}"], by_path["/"]
    for post in (hooked, ntfy):
        assert "complete" in post.text and run_id in post.text, post
        assert "$0.0100" in post.text and f"fks show {run_id}" in post.text, post
    assert hooked.body["type"] == "info"
    assert ntfy.body["topic"] == TOPIC
    deliveries = data["deliveries"]
    assert [(d["target"], d["service"], d["event"], d["ok"]) for d in deliveries] == [
        (0, "json", "run_end", True),
        (1, "ntfy", "run_end", True),
        (2, "json", "run_end", False),
    ]
    assert deliveries[2]["error"]
    assert "Notification (run_end) to notify[2] (json) failed" in done.output
    assert done.output.rstrip().endswith("Chain complete (1/1 steps, $0.0100)"), done.output
    shown = fks("show", run_id, cwd=repo).output
    assert "notify[1] (ntfy) sent, run_end to notify[2] (json) not sent" in shown, shown
    for seen in (text, done.output, shown):
        assert TOKEN not in seen and TOPIC not in seen


def test_a_budget_stop_goes_where_budget_stops_are_wanted(repo: Path, env: dict[str, str]) -> None:
    with notify_sink() as sink:
        configure(
            repo,
            [
                {"url": sink.url("json", "budget"), "events": ["budget"]},
                {"url": sink.url("json", "failures"), "level": "failure"},
                {"url": sink.url("json", "ends"), "events": ["run_end", "question"]},
            ],
        )
        done = fks("run", "worker:3", "-p", "Go.", "--max-cost", "0.005", cwd=repo, env=env)
        assert done.code == 1, done.output
        posts = sink.wait_for(2)
    assert sorted(p.path for p in posts) == ["/budget", "/ends"]
    data, _ = record(repo)
    for post in posts:
        assert post.body["type"] == "warning" and "stopped on its budget" in post.text, post
        assert f"fks run --resume {data['id']} --max-cost USD" in post.text, post.text
    assert [(d["target"], d["event"], d["ok"]) for d in data["deliveries"]] == [
        (0, "budget", True),
        (2, "budget", True),
    ]


def test_a_bad_url_is_one_line_before_anything_starts(repo: Path, env: dict[str, str]) -> None:
    configure(repo, [f"json://127.0.0.1:9/{TOKEN}", f"bogus://{TOKEN}"])
    done = fks("run", "worker", "-p", "Go.", cwd=repo, env=env)
    assert done.code == 2 and done.stderr.count("\n") == 1, done.output
    assert "notify[1]: Apprise cannot use this bogus URL" in done.stderr
    assert TOKEN not in done.output
    assert not (repo / ".forge" / "runs").exists()
    configure(repo, [{"env": "FKS_TEST_UNSET"}])
    done = fks("run", "worker", "--dry-run", cwd=repo, env=env)
    assert done.code == 2 and "FKS_TEST_UNSET is not set" in done.stderr, done.output


def test_a_forge_question_links_to_the_board_where_it_is_answered(
    repo: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    origin = "http://fks-" + "0123456789abcdef" * 2 + ".localhost:8400"
    with notify_sink() as sink, published(origin, [repo]):  # as a running `fks ui` does
        configure(repo, [{"url": sink.url(), "events": ["question"]}])
        created = fks("forge", "create", "Paint it", "--description", "Pick", cwd=repo)
        task = created.stdout.split()[-1]
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "task")
        asked = fks("forge", "run", cwd=repo, env={**env, "FAKE_ASK": "1"}, timeout=300)
        assert asked.code == 1, asked.output
        (question,) = sink.wait_for(1)
    assert question.body["type"] == "warning" and "Red or blue?" in question.text
    assert f'fks forge answer {task} "..."' in question.text
    assert f"Or on the board: {origin}/forge/0" in question.text, question.text
    assert "token" not in question.text
    (run,) = [json.loads(p.read_text()) for p in (repo / ".forge" / "runs").glob("*/run.json")]
    assert [(d["event"], d["ok"]) for d in run["deliveries"]] == [("question", True)]
