"""--max-cost as a hard budget: Claude is given what is left (--max-budget-usd), and an
iteration whose stream shows the budget crossed is stopped; the message names spent and limit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic, isolated_environ
from fks_testing.helpers import fks, git, init_repo, write_config


def bash(command: str) -> dict[str, Any]:
    return {"tool": "Bash", "input": {"command": command, "description": "run"}}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    write_config(path, {"agents": {"worker": {"systemPromptText": "You work.", "maxTurns": 20}}})
    git(path, "add", "-A")
    git(path, "commit", "-qm", "config")
    return path


def record(repo: Path) -> dict[str, Any]:
    (run_dir,) = (repo / ".forge" / "runs").iterdir()
    data = json.loads((run_dir / "run.json").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.claude
def test_max_cost_is_not_exceeded_by_more_than_one_turn(repo: Path) -> None:
    turns = [[bash(f"echo {n}")] for n in range(8)]  # $0.00135 a turn at the fake's usage
    with FakeAnthropic([turns]) as fake:
        env = isolated_environ(fake.env(repo.parent / "claude"))
        done = fks("run", "worker:3", "-p", "Go.", "--max-cost", "0.002", cwd=repo, env=env)
        asked = len(fake.main_requests())
    assert done.code == 1, done.output
    data = record(repo)
    (it,) = data["steps"][0]["iterations"]
    spent = it["claude"]["cost_usd"]
    assert it["reason"] == "budget" and asked == 2, (asked, done.output)
    assert 0.002 <= spent < 0.002 + 0.00135 * 1.01, spent
    assert data["reason"] == "max_cost" and data["steps"][0]["reason"] == "max_cost"
    stopped = f"Stopped: spent ${spent:.4f} of --max-cost $0.002"
    assert stopped in done.stdout, done.output
    spent_line = stopped.removeprefix("Stopped: ")
    assert f"Incomplete: worker stopped after 1 iteration: {spent_line}" in done.stdout


FAKE_CLAUDE = """#!{python}
import json, os, sys, time
with open(os.environ["ARGV_FILE"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
usage = {{"input_tokens": 1000000, "output_tokens": 1}}
message = {{"id": "m1", "model": "claude-sonnet-4-5", "content": [{{"type": "text", "text": "Thinking."}}], "usage": usage}}
for _ in range(2):  # one message, two events: counted once
    print(json.dumps({{"type": "assistant", "message": message}}), flush=True)
time.sleep(100)  # ignores --max-budget-usd: only fks can stop it
"""


def test_a_stream_that_crosses_the_budget_is_stopped(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(FAKE_CLAUDE.format(python=sys.executable))
    claude.chmod(0o755)
    argv_file = tmp_path / "argv.jsonl"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "ARGV_FILE": str(argv_file)}
    done = fks("run", "worker:3", "-p", "Go.", "--max-cost", "0.5", cwd=repo, env=env, timeout=60)
    assert done.code == 1, done.output
    (argv,) = [json.loads(line) for line in argv_file.read_text().splitlines()]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.5000"
    data = record(repo)
    (it,) = data["steps"][0]["iterations"]
    assert it["reason"] == "budget", done.output
    # 1M input tokens at Sonnet's price, counted once although two events carry the message.
    assert "Stopped: spent $3.00 of --max-cost $0.5" in done.stdout, done.output
    assert data["reason"] == "max_cost"
    # Stopped before its result: what its stream showed counts, for the budget and the record.
    assert it["claude"]["cost_usd"] == pytest.approx(3.000015)  # 1M in, 1 out token
    assert "did not complete: stopped after 1 iteration: spent $3.00" in done.stdout
    assert f"fks run --resume {data['id']} --max-cost USD" in done.stdout


def test_a_small_budget_is_shown_as_written_and_stopped_once_per_line(
    repo: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(FAKE_CLAUDE.format(python=sys.executable))
    claude.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ARGV_FILE": str(tmp_path / "argv.jsonl"),
    }
    done = fks("run", "worker:3", "-p", "Go.", "--max-cost", "0.00001", cwd=repo, env=env)
    assert done.code == 1, done.output
    assert "of --max-cost $0.00001" in done.stdout, done.output
    assert "e-05" not in done.output
    lines = [line for line in done.stdout.splitlines() if "spent $" in line]
    assert lines, done.output
    for line in lines:
        assert line.count("spent $") == 1 and line.count("Stopped") <= 1, line
    shown = fks("show", "last", cwd=repo)
    assert "(limit $0.00001)" in shown.stdout, shown.output


HOSTILE_CLAUDE = """#!{python}
import json, time
garbage = [-5, "9e9", True, None, float("nan"), [1], {{"a": 1}}, 10]
for n in range(4000):
    usage = {{"input_tokens": garbage[n % len(garbage)], "output_tokens": -(10**12)}}
    message = {{"id": f"m{{n}}", "model": "claude-opus-4", "content": [], "usage": usage}}
    print(json.dumps({{"type": "assistant", "message": message}}))
    print(json.dumps({{"type": "assistant", "message": "not an object", "usage": usage}}))
last = {{"id": "big", "model": "claude-opus-4", "content": [], "usage": {{"input_tokens": 20000}}}}
print(json.dumps({{"type": "assistant", "message": last}}), flush=True)
time.sleep(100)
"""


def test_made_up_usage_in_a_hostile_stream_counts_only_real_token_counts(
    repo: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(HOSTILE_CLAUDE.format(python=sys.executable))
    claude.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = fks("run", "worker:2", "-p", "Go.", "--max-cost", "0.1", cwd=repo, env=env, timeout=60)
    assert done.code == 1, done.output
    (it,) = record(repo)["steps"][0]["iterations"]
    assert it["reason"] == "budget", it
    # 500 messages of 10 input tokens and one of 20,000, at Opus' lowest price ($5/M): strings,
    # booleans, NaN, negative and nested values count as nothing.
    assert "Stopped: spent $0.1250 of --max-cost $0.1" in done.stdout, done.output


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("0", "0")])
def test_a_budget_that_is_not_positive_is_refused_as_written(
    repo: Path, value: str, shown: str
) -> None:
    done = fks("run", "worker:3", "--max-cost", value, cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr == f"fks: --max-cost must be a positive amount of USD, got {shown}\n"
    assert not (repo / ".forge" / "runs").exists()
