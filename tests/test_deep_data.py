"""Data an agent or a repository wrote, nested deeper or larger than a parser can take (Python's
parsers recurse once per level): the run goes on, and every command and page that reads it
shows one named line in its place, never a RecursionError."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest
from fks_testing.helpers import Result, commit_scripts, fks, git, init_repo
from starlette.testclient import TestClient

from sandbox_runner.web.app import create_app
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 50_000 + "1" + "}" * 50_000
UNREAD = "(an event nested deeper than 100 levels, not read; `fks logs --raw` has it)"
PORT = 48767

# A stand-in for `claude -p`: its stream-json with the lines DEEP names (a model's tool can
# write anything to the CLI's stdout), and a result whose structured output nests DEPTH deep.
FAKE_CLAUDE = """#!PYTHON
import json, os
def say(event): print(json.dumps(event), flush=True)
say({"type": "system", "subtype": "init", "session_id": "s1", "model": "m"})
if os.environ.get("DEEP"):
    print("[" * 50000 + "]" * 50000, flush=True)
    print('{"a":' * 50000 + "1" + "}" * 50000, flush=True)
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "FORKHESTRA_COMPLETE"}]}})
depth = int(os.environ.get("DEPTH", "0"))
answer = ('{"a":' * depth + "1" + "}" * depth) if depth else "null"
print('{"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, '
      '"total_cost_usd": 0.01, "result": "FORKHESTRA_COMPLETE", "session_id": "s1", '
      '"structured_output": ' + answer + "}", flush=True)
"""


@pytest.fixture
def claude_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A repository whose agent `bot` is Claude, and the environment that puts a fake `claude`
    on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(FAKE_CLAUDE.replace("PYTHON", sys.executable))
    claude.chmod(0o755)
    project = init_repo(tmp_path / "proj")
    (project / "forge").mkdir()
    (project / "forge" / "chains.json").write_text(
        json.dumps({"agents": {"bot": {"systemPromptText": "Work."}}})
    )
    git(project, "add", "forge")
    git(project, "commit", "-qm", "config")
    return project, {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def client_for(project: Path) -> TestClient:
    guard = Guard(token=secrets.token_urlsafe(16), port=PORT, name="fks-test.localhost")
    client = TestClient(
        create_app(Sources([project]), guard), base_url=f"http://fks-test.localhost:{PORT}"
    )
    assert client.get(f"/static/fks.css?token={guard.token}").status_code == 200
    return client


def run_ids(project: Path) -> list[str]:
    return sorted(p.name for p in (project / ".forge" / "runs").iterdir())


def assert_no_traceback(done: Result) -> None:
    assert "Traceback" not in done.output and "RecursionError" not in done.output, done.output


def test_claude_step_goes_on_past_deep_lines(claude_project: tuple[Path, dict[str, str]]) -> None:
    project, env = claude_project
    done = fks("run", "bot:2", cwd=project, env={**env, "DEEP": "1"})
    assert_no_traceback(done)
    assert done.code == 0, done.output[-2000:]
    assert "[fks] Complete after 1 iteration" in done.stdout  # the marker after them counted
    (run_id,) = run_ids(project)
    logs = fks("logs", run_id, cwd=project)
    assert_no_traceback(logs)
    assert logs.code == 0
    assert f"\n{UNREAD}\n" in logs.stdout  # the object: one named line
    assert "  │ [[[[" in logs.stdout and "more bytes not shown" in logs.stdout  # not an event
    assert "result: success, 1 turn" in logs.stdout
    assert len(logs.stdout) < 20_000
    shown = fks("show", run_id, cwd=project)
    assert shown.code == 0 and "agent CLI: $0.0100" in shown.stdout, shown.output
    page = client_for(project).get(f"/runs/0/{run_id}/steps/1/iterations/1")
    assert page.status_code == 200
    assert UNREAD in page.text and "result: success" in page.text


def test_deep_first_line_of_a_plain_step(tmp_path: Path) -> None:
    agent = f"#!/bin/sh\nprintf '%s\\n' '{DEEP_OBJECT}' '{DEEP_ARRAY}'\necho FORKHESTRA_COMPLETE\n"
    project = commit_scripts(init_repo(tmp_path / "proj"), {"deep.sh": agent})
    done = fks("run", "./scripts/deep.sh:2", cwd=project)
    assert done.code == 0, done.output[-2000:]
    (run_id,) = run_ids(project)
    logs = fks("logs", run_id, cwd=project)  # the first line decides whether it is Claude's
    assert_no_traceback(logs)
    assert logs.code == 0
    assert logs.stdout.startswith('{"a":{"a":') and "FORKHESTRA_COMPLETE" in logs.stdout
    assert len(logs.stdout) < 20_000
    page = client_for(project).get(f"/runs/0/{run_id}/steps/1/iterations/1")
    assert page.status_code == 200
    assert "{&#34;a&#34;:{&#34;a&#34;:" in page.text and "more bytes not shown" in page.text


@pytest.mark.parametrize(("depth", "kept"), [(99, True), (300, False)])
def test_structured_output_nesting_is_bounded(
    claude_project: tuple[Path, dict[str, str]], depth: int, kept: bool
) -> None:
    """A result nested within the bound is recorded and the record stays readable; one nested
    deeper is not read (it used to stop the run when the record was written)."""
    project, env = claude_project
    done = fks("run", "bot", cwd=project, env={**env, "DEPTH": str(depth)})
    assert_no_traceback(done)
    assert done.code == 0, done.output[-2000:]
    (run_id,) = run_ids(project)
    record = json.loads((project / ".forge" / "runs" / run_id / "run.json").read_text())
    stats = record["steps"][0]["iterations"][0]["claude"]
    assert (stats is not None and stats["structured_output"] is not None) is kept
    listed = fks("runs", cwd=project)
    assert listed.code == 0 and run_id in listed.stdout
    assert fks("show", run_id, cwd=project).code == 0
    assert client_for(project).get(f"/runs/0/{run_id}").status_code == 200


@pytest.mark.parametrize(
    "content",
    [b'{"id": "caf\xe9"}', ("[" * 100_000 + "]" * 100_000).encode()],
    ids=["not-utf8", "deep"],
)
def test_unreadable_run_record_is_one_line(tmp_path: Path, content: bytes) -> None:
    project = commit_scripts(init_repo(tmp_path / "proj"), {"ok.sh": "#!/bin/sh\necho hi\n"})
    assert fks("run", "./scripts/ok.sh", cwd=project).code == 0
    (good,) = run_ids(project)
    bad = project / ".forge" / "runs" / "20200101-000000-dead"
    bad.mkdir()
    (bad / "run.json").write_bytes(content)
    listed = fks("runs", cwd=project)
    assert_no_traceback(listed)
    assert listed.code == 0 and good in listed.stdout and bad.name not in listed.stdout
    shown = fks("show", bad.name, cwd=project)
    assert_no_traceback(shown)
    assert shown.code == 2
    (line,) = shown.stderr.splitlines()
    assert line.startswith(f"fks: {bad / 'run.json'} is not a valid run record ("), line
    assert client_for(project).get("/").status_code == 200


def test_deep_work_item_is_one_line(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "proj")
    work = project / ".forge" / "work"
    work.mkdir(parents=True)
    (work / "TASK-1-001.yaml").write_text("task_id: " + "[" * 5000 + "]" * 5000)
    done = fks("forge", "status", cwd=project)
    assert_no_traceback(done)
    assert done.code == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"fks: {work / 'TASK-1-001.yaml'} is not a valid forge work item (nested deeper"
    )
    assert line.endswith("; fix or delete it")
    board = client_for(project).get("/forge").text  # the board names it too
    assert "TASK-1-001.yaml is not a valid forge work item (nested deeper" in board


# Seven lines that make ten million values: an alias counts as all it repeats.
ALIASES = "".join(
    f"x{level}: &{chr(97 + level)} [{', '.join([f'*{chr(96 + level)}'] * 10)}]\n"
    for level in range(1, 7)
)


@pytest.mark.parametrize(
    "header",
    [
        f"model: {'[' * 5000}{']' * 5000}\n",
        f"x0: &a [{', '.join(['x'] * 10)}]\n{ALIASES}tools: *g\n",
    ],
    ids=["deep", "aliases"],
)
def test_agent_front_matter_past_bounds_is_one_line(tmp_path: Path, header: str) -> None:
    """A repository's Claude agent file whose front matter is past a bound is refused in one
    line naming the file, before anything runs."""
    project = init_repo(tmp_path / "proj")
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "x.md").write_text(f"---\nname: x\n{header}---\nDo the work.\n")
    done = fks("run", ".claude/agents/x", "--dry-run", cwd=project)
    assert_no_traceback(done)
    assert done.code == 2, done.output[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "x.md: front matter is" in lines[0], lines
    assert "nested deeper than" in lines[0] or "values" in lines[0]


def test_deep_devcontainer_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / ".devcontainer" / "devcontainer.json"
    file.parent.mkdir()
    file.write_text('{"image": ' + "[" * 50_000 + "]" * 50_000 + "}")
    done = fks("image", "build", "--devcontainer", str(tmp_path))
    assert_no_traceback(done)
    assert (done.code, done.stderr.splitlines()) == (
        2,
        [f"fks: {file}: nested deeper than 100 levels, too much to be a devcontainer.json"],
    )


@pytest.mark.docker
@pytest.mark.claude
def test_sandboxed_claude_tool_writes_deep_json_to_stdout(tmp_path: Path) -> None:
    """A model's tool writes deep JSON lines to the container's stdout, among the CLI's
    stream-json: the run completes, its log and page name them."""
    from fks_testing.claude import bash, claude_env, run_fks
    from fks_testing.fakeapi import FakeAnthropic
    from fks_testing.helpers import write_config

    from sandbox_runner.plan.prompts import MARKER

    project = init_repo(tmp_path / "proj")
    write_config(project, {"agents": {"worker": {"systemPromptText": "Work.", "maxTurns": 5}}})
    git(project, "add", "forge")
    git(project, "commit", "-qm", "config")
    # The tool writes past the CLI, straight to the container's stdout (its init's).
    deep = (
        "import sys; sys.stdout.write('{\"a\":' * 50000 + '1' + '}' * 50000 + '\\n'"
        " + '[' * 50000 + ']' * 50000 + '\\n')"
    )
    with FakeAnthropic(host="0.0.0.0") as fake:
        fake.add_conversation(
            [
                [bash(f'python3 -c "{deep}" > /proc/1/fd/1', "deep")],
                [{"text": f"Done.\n{MARKER}"}],
            ]
        )
        done = run_fks(
            "run", "worker:2", "--prompt", "Go.", "--sandbox", cwd=project, env=claude_env(fake)
        )
    assert done.code == 0, done.tail()
    assert "Complete after 1 iteration" in done.stdout
    (run_id,) = run_ids(project)
    logs = fks("logs", run_id, cwd=project)
    assert_no_traceback(logs)
    assert logs.code == 0
    assert UNREAD in logs.stdout and len(logs.stdout) < 20_000
    assert fks("show", run_id, cwd=project).code == 0
    page = client_for(project).get(f"/runs/0/{run_id}/steps/1/iterations/1")
    assert page.status_code == 200 and UNREAD in page.text
