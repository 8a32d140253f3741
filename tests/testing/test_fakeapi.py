"""The scripted Messages API fake, alone (HTTP) and driving the real claude CLI.

Set FKS_RECORD_STREAMJSON=1 to rewrite tests/data/streamjson/*.jsonl from these claude runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import (
    EXHAUSTED_TEXT,
    SIDE_TEXT,
    FakeAnthropic,
    Request,
    isolated_environ,
)

from sandbox_runner.agentclis.claude import StreamJsonParser
from sandbox_runner.agentclis.events import Result
from sandbox_runner.plan.prompts import MARKER

FIXTURES = Path(__file__).parents[1] / "data" / "streamjson"
TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]

needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="claude CLI not on PATH")


def post(url: str, body: Any, path: str = "/v1/messages") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": "secret"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]


def message(text: str, *, stream: bool = True, history: int = 0) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    for _ in range(history):
        messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    return {"model": "m", "messages": messages, "tools": TOOLS, "stream": stream, "max_tokens": 9}


# -- the fake over plain HTTP -------------------------------------------------------------------


def test_streams_text_and_tool_use_as_sse() -> None:
    script = [[[{"text": "hello"}, {"tool": "Bash", "input": {"command": "ls"}}]]]
    with FakeAnthropic(script) as fake:
        status, headers, raw = post(fake.url, message("go"))
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = sse_events(raw)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[2]["delta"] == {"type": "text_delta", "text": "hello"}
    assert events[4]["content_block"]["name"] == "Bash"
    assert json.loads(events[5]["delta"]["partial_json"]) == {"command": "ls"}
    assert events[7]["delta"]["stop_reason"] == "tool_use"
    assert events[7]["usage"]["output_tokens"] > 0


def test_answers_stream_false_with_json() -> None:
    with FakeAnthropic([[[{"text": "plain"}]]]) as fake:
        status, _, raw = post(fake.url, message("go", stream=False))
    body = json.loads(raw)
    assert status == 200
    assert body["content"] == [{"type": "text", "text": "plain"}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["input_tokens"] > 0


def test_side_requests_do_not_consume_turns() -> None:
    # Shaped like the session-title request the interactive CLI sends (none in print mode).
    title = {
        "model": "m",
        "tools": [],
        "stream": False,
        "system": [{"type": "text", "text": "You are Claude Code. Generate a concise title."}],
        "messages": [{"role": "user", "content": "<session>run echo hi</session>"}],
        "thinking": {"type": "disabled"},
        "output_config": {
            "format": {
                "type": "json_schema",
                "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            }
        },
    }
    toolless_main = {
        **message("go", stream=False),
        "tools": [],
        "system": "You are an interactive agent",
    }
    with FakeAnthropic([[["scripted"], ["second"]]]) as fake:
        _, _, counted = post(fake.url, message("x"), "/v1/messages/count_tokens")
        _, _, side_raw = post(
            fake.url, {"model": "haiku", "messages": [{"role": "user", "content": "?"}]}
        )
        _, _, title_raw = post(fake.url, title)
        _, _, main_raw = post(fake.url, message("go", stream=False))
        _, _, toolless_raw = post(
            fake.url, {**toolless_main, "messages": message("", history=1)["messages"]}
        )
    assert json.loads(counted)["input_tokens"] > 0
    assert json.loads(side_raw)["content"][0]["text"] == SIDE_TEXT
    assert json.loads(json.loads(title_raw)["content"][0]["text"]) == {"title": SIDE_TEXT}
    assert json.loads(main_raw)["content"][0]["text"] == "scripted"
    assert json.loads(toolless_raw)["content"][0]["text"] == "second"
    assert [r.kind for r in fake.requests] == ["count_tokens", "side", "side", "main", "main"]


def test_scripted_errors_and_repeats() -> None:
    script = [[{"error": 429, "retry_after": 7, "times": 2}, {"error": "overloaded"}, ["ok"]]]
    with FakeAnthropic(script) as fake:
        answers = [post(fake.url, message("go", stream=False, history=i)) for i in range(4)]
    statuses = [status for status, _, _ in answers]
    assert statuses == [429, 429, 529, 200]
    assert answers[0][1]["retry-after"] == "7"
    assert json.loads(answers[2][2])["error"]["type"] == "overloaded_error"


def test_exhausted_script_answers_clearly_and_records() -> None:
    with FakeAnthropic([]) as fake:
        _, _, raw = post(fake.url, message("go", stream=False))
    assert json.loads(raw)["content"][0]["text"] == EXHAUSTED_TEXT
    assert len(fake.exhausted) == 1


def test_matchers_pick_conversations_and_sessions_keep_them() -> None:
    script = {
        "conversations": [
            {"match": "builder", "turns": [["build 1"], ["build 2"]]},
            {"match": "planner", "turns": [["plan 1"]]},
        ]
    }

    def ask(text: str, session: str, history: int = 0) -> str:
        request = urllib.request.Request(
            fake.url + "/v1/messages",
            data=json.dumps(message(text, stream=False, history=history)).encode(),
            headers={"content-type": "application/json", "x-claude-code-session-id": session},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read())["content"][0]["text"])

    with FakeAnthropic(script) as fake:
        assert ask("you are the planner", "s1") == "plan 1"
        assert ask("you are the builder", "s2") == "build 1"
        # A retry of the first request (no assistant turn yet) stays in its session.
        assert ask("you are the builder", "s2") == "build 2"
        assert ask("you are the planner", "s3") == EXHAUSTED_TEXT
    assert [r.conversation for r in fake.main_requests()] == [1, 0, 0, None]


def test_callable_turns_and_responder() -> None:
    def echo(request: Request) -> list[dict[str, str]]:
        return [{"text": "you said " + request.prompt}]

    def responder(request: Request) -> list[dict[str, str]] | None:
        return [{"text": "intercepted"}] if "secret" in request.prompt else None

    with FakeAnthropic([[echo]], responder=responder) as fake:
        _, _, first = post(fake.url, message("secret", stream=False))
        _, _, second = post(fake.url, message("hello", stream=False))
    assert json.loads(first)["content"][0]["text"] == "intercepted"
    assert json.loads(second)["content"][0]["text"] == "you said hello"


def test_records_requests_without_secrets(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with FakeAnthropic([[["x"]]], log_path=log) as fake:
        post(fake.url, message("go"))
    recorded = fake.requests[0]
    assert "x-api-key" not in {k.lower() for k in recorded.headers}
    assert recorded.body["messages"][0]["content"] == "go"
    assert json.loads(log.read_text())["kind"] == "main"


def test_runs_as_a_standalone_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"conversations": [[["from file"]]]}))
    fakeapi = ["-m", "fks_testing.fakeapi"]
    process = subprocess.Popen(
        [sys.executable, *fakeapi, "--host", "0.0.0.0", "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("fake API listening on http://0.0.0.0:")
        port = int(line.rsplit(":", 1)[1])
        _, _, raw = post(f"http://127.0.0.1:{port}", message("go", stream=False))
        assert json.loads(raw)["content"][0]["text"] == "from file"
    finally:
        process.terminate()
        process.wait(timeout=10)


# -- the real claude CLI against the fake -------------------------------------------------------


@dataclass
class ClaudeRun:
    returncode: int
    lines: list[str]
    stderr: str
    seconds: float
    parser: StreamJsonParser

    @property
    def result(self) -> Result:
        assert self.parser.result is not None, "no result line:\n" + "\n".join(self.lines)
        return self.parser.result

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = []
        for line in self.lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") == kind:
                found.append(obj)
        return found


def run_claude(
    fake: FakeAnthropic,
    tmp_path: Path,
    prompt: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    record: str | None = None,
) -> ClaudeRun:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    argv = ["claude", "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--dangerously-skip-permissions", "--append-system-prompt", "You are the fks agent."]
    started = time.monotonic()
    completed = subprocess.run(
        [*argv, *args],
        cwd=workdir,
        env=isolated_environ({**fake.env(tmp_path / "claude-config"), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - started
    parser = StreamJsonParser()
    lines = completed.stdout.splitlines()
    for line in lines:
        parser.feed_line(line)
    if record and os.environ.get("FKS_RECORD_STREAMJSON"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        (FIXTURES / f"{record}.jsonl").write_text(completed.stdout)
    return ClaudeRun(completed.returncode, lines, completed.stderr, seconds, parser)


@needs_claude
@pytest.mark.claude
def test_claude_text_conversation_completes(tmp_path: Path) -> None:
    with FakeAnthropic([[[{"text": f"All done.\n{MARKER}"}]]]) as fake:
        run = run_claude(fake, tmp_path, "Build the thing.", record="text_complete")
    assert run.returncode == 0, run.stderr
    assert run.result.subtype == "success"
    assert not run.result.is_error
    assert run.result.cost_usd and run.result.cost_usd > 0
    assert run.parser.marker_seen
    (main,) = fake.main_requests()
    assert "You are the fks agent." in main.system_text
    assert main.prompt == "Build the thing."
    assert main.session_id == run.result.session_id
    assert not fake.exhausted
    # Besides the conversation the CLI only probes the base URL (HEAD /).
    assert {(r.method, r.kind) for r in fake.side_requests()} <= {("HEAD", "probe")}


@needs_claude
@pytest.mark.claude
def test_claude_runs_a_real_bash_tool(tmp_path: Path) -> None:
    script = [
        [
            [
                {"text": "Writing the file."},
                {"tool": "Bash", "input": {"command": "echo hi > f.txt", "description": "write"}},
            ],
            [{"tool": "Bash", "input": {"command": "cat f.txt", "description": "show"}}],
            [{"text": f"Wrote f.txt.\n{MARKER}"}],
        ]
    ]
    with FakeAnthropic(script) as fake:
        run = run_claude(fake, tmp_path, "Write f.txt", "--max-turns", "5", record="tool_bash")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "work" / "f.txt").read_text() == "hi\n"
    assert run.result.num_turns == 3
    last = fake.main_requests()[-1]
    assert last.tool_results[-1]["content"] == "hi"
    assert run.parser.marker_seen


@needs_claude
@pytest.mark.claude
def test_claude_max_turns(tmp_path: Path) -> None:
    script = [
        [
            [{"tool": "Bash", "input": {"command": "echo 1", "description": "one"}}],
            [{"tool": "Bash", "input": {"command": "echo 2", "description": "two"}}],
            [{"text": MARKER}],
        ]
    ]
    with FakeAnthropic(script) as fake:
        run = run_claude(fake, tmp_path, "Loop", "--max-turns", "1", record="max_turns")
    assert run.returncode == 1
    assert run.result.subtype == "error_max_turns"
    assert run.result.is_error
    assert not run.parser.marker_seen
    assert len(fake.main_requests()) == 1


@needs_claude
@pytest.mark.claude
def test_claude_cat_of_marker_file_does_not_complete(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "PROMPT.md").write_text(f"Do the work.\nThen say\n{MARKER}\n")
    script = [
        [
            [{"tool": "Bash", "input": {"command": "cat PROMPT.md", "description": "read"}}],
            [{"text": f"I will say {MARKER} when the work is done; it is not done yet."}],
        ]
    ]
    with FakeAnthropic(script) as fake:
        run = run_claude(fake, tmp_path, "Read PROMPT.md", record="cat_marker")
    assert run.returncode == 0, run.stderr
    assert MARKER in fake.main_requests()[-1].tool_results[0]["content"]
    assert not run.parser.marker_seen


@needs_claude
@pytest.mark.claude
def test_claude_marker_on_its_own_line_in_longer_text(tmp_path: Path) -> None:
    text = f"Summary of the work:\n- tests pass\n\n  {MARKER}  \nThanks."
    with FakeAnthropic([[[{"text": text}]]]) as fake:
        run = run_claude(fake, tmp_path, "Finish", record="marker_in_text")
    assert run.result.text == text
    assert run.parser.marker_seen


@needs_claude
@pytest.mark.claude
@pytest.mark.parametrize(
    ("status", "name"),
    [(429, "rate_limit_429"), (529, "overloaded_529"), (500, "server_error_500")],
)
def test_claude_api_errors_after_bounded_retries(tmp_path: Path, status: int, name: str) -> None:
    # The CLI retries 10 times (~3 minutes) by default; CLAUDE_CODE_MAX_RETRIES bounds that.
    script = [[{"error": status, "retry_after": 0, "times": "forever"}]]
    with FakeAnthropic(script) as fake:
        run = run_claude(
            fake, tmp_path, "Hi", env={"CLAUDE_CODE_MAX_RETRIES": "1"}, timeout=60, record=name
        )
    assert run.returncode == 1
    assert len(fake.main_requests()) == 2
    retries = [e for e in run.events("system") if e.get("subtype") == "api_retry"]
    assert [(e["attempt"], e["error_status"]) for e in retries] == [(1, status)]
    result = run.result
    assert (result.subtype, result.is_error, result.api_error_status) == ("success", True, status)
    assert result.text and result.text.startswith("API Error")
    assert result.rate_limited == (status in (429, 529))
    assert not run.parser.marker_seen


@needs_claude
@pytest.mark.claude
def test_claude_recovers_from_one_overload_and_a_dropped_stream(tmp_path: Path) -> None:
    script = [
        [
            {"error": 529},
            {"blocks": [{"text": "cut off"}], "drop": True},
            [{"text": f"Recovered.\n{MARKER}"}],
        ]
    ]
    with FakeAnthropic(script) as fake:
        run = run_claude(fake, tmp_path, "Hi", timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.parser.marker_seen
    # A dropped stream makes the CLI retry without streaming.
    assert [r.body.get("stream") for r in fake.main_requests()] == [True, True, None]


@needs_claude
@pytest.mark.claude
def test_claude_planner_and_builder_conversations(tmp_path: Path) -> None:
    script = [
        {"match": "role: builder", "turns": [[{"text": f"built\n{MARKER}"}]]},
        {"match": "role: planner", "turns": [[{"text": "planned"}]]},
    ]
    with FakeAnthropic(script) as fake:
        planner = run_claude(fake, tmp_path, "role: planner. Plan.")
        builder = run_claude(fake, tmp_path, "role: builder. Build.")
    assert (planner.result.text, builder.result.text) == ("planned", f"built\n{MARKER}")
    assert fake.conversations_started == 2
    assert not fake.exhausted
