"""`fks runs`, `fks show` and `fks logs` on records made by real `fks run` invocations."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fks_testing.helpers import FKS, Result, commit_scripts, fks
from fks_testing.runs import (
    complete_run,
    incomplete_run,
    new_run,
    recorded_project,  # noqa: F401  (the fixture `project`)
    run_ids,
)

ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def record(project: Path, run_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads((project / ".forge" / "runs" / run_id / "run.json").read_text())


def fks_bytes(*args: str, cwd: Path) -> bytes:
    done = subprocess.run([FKS, *args], cwd=cwd, capture_output=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(condition: Callable[[], bool], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def assert_one_line_error(done: Result, *fragments: str) -> None:
    assert done.code == 2, done.output
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fks: ")
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def background(project: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `fks run` in the background; whatever is still going at the end is killed."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [FKS, "run", *args],
            cwd=project,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def started_iteration(project: Path) -> bool:
    runs = project / ".forge" / "runs"
    if not runs.is_dir():
        return False
    for run_dir in runs.iterdir():
        try:
            data = json.loads((run_dir / "run.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        logs = [run_dir / it["log"] for s in data["steps"] for it in s["iterations"] if it["log"]]
        if any(log.is_file() and log.stat().st_size for log in logs):
            return True
    return False


# --- fks runs -----------------------------------------------------------------------------------


def test_runs_without_records(project: Path) -> None:
    done = fks("runs", cwd=project)
    assert done.code == 0
    assert "No runs recorded" in done.stdout


def test_runs_lists_complete_and_incomplete_runs_oldest_first(project: Path) -> None:
    first = complete_run(project)
    second = incomplete_run(project)
    done = fks("runs", cwd=project)
    assert done.code == 0, done.output
    assert "\x1b" not in done.stdout  # a pipe gets plain text
    header, *rows, blank, total = done.stdout.splitlines()
    assert header.split() == ["ID", "CHAIN", "STARTED", "DURATION", "STATUS", "STEPS", "COST"]
    assert [row.split()[0] for row in rows] == [first, second]
    assert re.search(r"\bcomplete\s+2/2\s+\$0\.0000$", rows[0])
    assert re.search(r"\bincomplete\s+1/3\s+\$0\.0000$", rows[1])
    assert (blank, total) == ("", "Total: 2 runs, 1 landed, 0 failed, $0.0000")
    assert "./scripts/ok.sh:3 -> ./scripts/ok.sh" in rows[0]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+\d+\.\ds\s", rows[0])
    # columns are aligned: every status starts at the same offset
    assert rows[0].index(" complete") + 1 == rows[1].index("incomplete")


def test_runs_on_a_terminal_is_a_table(project: Path) -> None:
    run_id = complete_run(project)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    env = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")
    }  # the pty's size rules
    proc = subprocess.Popen(
        [FKS, "runs"], cwd=project, env=env, stdin=follower, stdout=follower, stderr=subprocess.PIPE
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    text = b"".join(chunks).decode()
    assert run_id in text
    assert "complete" in text
    assert "\x1b[" in text  # rich colors the status on a terminal


def test_a_run_whose_process_died_is_shown_as_died(
    project: Path, background: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pidfile = tmp_path / "agent.pid"
    proc = background("./scripts/slow.sh:2", env={"SLOW": "30", "PIDFILE": str(pidfile)})
    wait_for(lambda: started_iteration(project))
    os.killpg(proc.pid, signal.SIGKILL)  # fks gone without a chance to update run.json
    proc.wait()
    os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the agent runs in its own session
    run_id = run_ids(project)[-1]
    assert record(project, run_id)["status"] == "running"

    listing = fks("runs", cwd=project)
    row = listing.stdout.splitlines()[-3]
    assert re.search(rf"^{run_id}\s.*\s-\s+died\s+0/1\s+\$0\.0000$", row), listing.stdout
    assert listing.stdout.splitlines()[-1] == "Total: 1 run, 0 landed, 1 failed, $0.0000"
    shown = fks("show", "last", cwd=project)
    assert "status:     died" in shown.stdout
    assert f"fks run --resume {run_id}" in shown.stdout
    assert "Step 1: ./scripts/slow.sh  died" in shown.stdout
    # following a dead run prints what there is and ends
    started = time.monotonic()
    followed = fks("logs", "last", "--follow", cwd=project, timeout=120)
    assert followed.code == 0
    assert "tick A 1" in followed.stdout
    assert time.monotonic() - started < 60  # it ended, not timed out


# --- fks show -----------------------------------------------------------------------------------


def test_show_incomplete_run(project: Path) -> None:
    run_id = incomplete_run(project)
    done = fks("show", "last", cwd=project)
    assert done.code == 0, done.output
    out = done.stdout
    assert out.startswith(f"Run {run_id}\n")
    assert "dsl:        ./scripts/ok.sh:2 -> ./scripts/fail.sh:2 -> ./scripts/ok.sh" in out
    assert "status:     incomplete (max_iterations), stopped at step 2" in out
    assert "ran:        in place (no sandbox)" in out
    assert re.search(r"started:    \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", out)
    assert re.search(r"duration:   \d+\.\ds", out)
    assert "cost:       $0.0000" in out
    step1, step2, step3 = out.split("\n\n")[1:]
    assert step1.startswith("Step 1: ./scripts/ok.sh  complete (marker)")
    assert "iterations: 1/2" in step1
    assert re.search(
        r"#1  \d\d:\d\d:\d\d  \d+\.\ds  exit 0  marker yes  changed yes  reason marker", step1
    )
    assert step2.startswith("Step 2: ./scripts/fail.sh  incomplete (max_iterations)")
    assert "iterations: 2/2" in step2
    assert re.search(
        r"#2  \d\d:\d\d:\d\d  \d+\.\ds  exit 3  marker no  changed yes  reason exit_3", step2
    )
    assert "stderr: boom 2" in step2
    log_lines = re.findall(r"log: (\S+)", step2)
    assert log_lines == [
        f".forge/runs/{run_id}/02-fail.sh/001.log",
        f".forge/runs/{run_id}/02-fail.sh/002.log",
    ]
    assert all((project / p).is_file() for p in log_lines)
    assert step3.startswith("Step 3: ./scripts/ok.sh  not started")
    assert "iterations: 0/1 (runs once)" in step3
    assert "branch:" not in out  # a local run makes no branches


def test_show_claude_stats_and_cost(project: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord
    from sandbox_runner.results.reported import ClaudeStats

    run_id = complete_run(project)
    path = project / ".forge" / "runs" / run_id / "run.json"
    rec = RunRecord.model_validate_json(path.read_text())
    rec.steps[0].iterations[0].claude = ClaudeStats(
        cost_usd=0.0123,
        input_tokens=1200,
        output_tokens=340,
        turns=7,
        subtype="success",
        session_id="sess-42",
    )
    write_atomic(path, rec.model_dump_json())
    shown = fks("show", run_id, cwd=project).stdout
    assert (
        "agent CLI: $0.0123, 1200 in / 340 out tokens, 7 turns, success, session sess-42" in shown
    )
    assert "cost:       $0.0123" in shown
    assert fks("runs", cwd=project).stdout.splitlines()[-1].endswith("$0.0123")


def test_secrets_stay_out_of_logs_and_show(project: Path) -> None:
    script = project / "scripts" / "leak.sh"
    script.write_text(
        '#!/bin/sh\necho "key=$ANTHROPIC_API_KEY"\necho "err $ANTHROPIC_API_KEY" >&2\nexit 1\n'
    )
    script.chmod(0o755)
    secret = "sk-ant-test-0123456789abcdef"
    done = fks("run", str(script), cwd=project, env={"ANTHROPIC_API_KEY": secret})
    assert secret not in done.output
    for args in (("show", "last"), ("logs", "last")):
        out = fks(*args, cwd=project)
        assert out.code == 0
        assert secret not in out.stdout
    assert "key=********" in fks("logs", "last", cwd=project).stdout


# --- run references ------------------------------------------------------------------------------


def test_run_references(project: Path) -> None:
    first = complete_run(project)
    second = incomplete_run(project)
    assert ID.match(first) and ID.match(second)
    assert fks("show", first[:-1], cwd=project).stdout.startswith(f"Run {first}\n")
    assert fks("show", second, cwd=project).stdout.startswith(f"Run {second}\n")
    assert fks("show", "last", cwd=project).stdout.startswith(f"Run {second}\n")
    assert fks("show", cwd=project).stdout.startswith(f"Run {second}\n")  # RUN defaults to last
    assert_one_line_error(fks("show", "2", cwd=project), "matches 2 runs", "give more of the id")
    assert_one_line_error(fks("show", "nope", cwd=project), "no run matches 'nope'")
    assert_one_line_error(fks("logs", "nope", cwd=project), "no run matches 'nope'")


def test_show_without_runs_is_an_error(project: Path) -> None:
    assert_one_line_error(fks("show", "last", cwd=project), "no runs recorded")


def test_cwd_option_and_subdirectories_find_the_project(project: Path, tmp_path: Path) -> None:
    run_id = complete_run(project)
    sub = project / "scripts"
    assert fks("show", "last", cwd=sub).stdout.startswith(f"Run {run_id}\n")
    assert run_id in fks("runs", "--cwd", str(sub), cwd=tmp_path).stdout


# --- fks logs ------------------------------------------------------------------------------------


def test_logs_of_a_whole_run_step_and_iteration(project: Path) -> None:
    incomplete_run(project)
    everything = fks_bytes("logs", "last", "--raw", cwd=project)
    assert everything == (
        b"==> step 1 (./scripts/ok.sh) iteration 1 <==\n"
        b"ok output 1\nFORKHESTRA_COMPLETE\n"
        b"\n==> step 2 (./scripts/fail.sh) iteration 1 <==\n"
        b"fail output 1\nraw \xff byte\nboom 1\n"
        b"\n==> step 2 (./scripts/fail.sh) iteration 2 <==\n"
        b"fail output 2\nraw \xff byte\nboom 2\n"
    )
    # Readable by default: the byte that is not UTF-8 shows as �, and between fks's headers the
    # agent's lines are marked as in plain output.
    assert fks_bytes("logs", "last", cwd=project).decode() == (
        "==> step 1 (./scripts/ok.sh) iteration 1 <==\n"
        "  │ ok output 1\n  │ FORKHESTRA_COMPLETE\n"
        "\n==> step 2 (./scripts/fail.sh) iteration 1 <==\n"
        "  │ fail output 1\n  │ raw \ufffd byte\n  │ boom 1\n"
        "\n==> step 2 (./scripts/fail.sh) iteration 2 <==\n"
        "  │ fail output 2\n  │ raw \ufffd byte\n  │ boom 2\n"
    )
    step = fks_bytes("logs", "last", "2", "--raw", cwd=project)
    assert step == everything[everything.index(b"==> step 2") :]
    one = fks_bytes("logs", "last", "2", "--iteration", "2", "--raw", cwd=project)
    assert one == b"fail output 2\nraw \xff byte\nboom 2\n"  # the raw bytes, no header
    single = fks_bytes("logs", "last", "1", cwd=project)
    assert single == b"ok output 1\nFORKHESTRA_COMPLETE\n"  # one log: no header


def test_logs_of_a_step_that_never_started(project: Path) -> None:
    incomplete_run(project)
    done = fks("logs", "last", "3", cwd=project)
    assert done.code == 0
    assert done.stdout == ""
    assert "no output recorded for step 3" in done.stderr


def test_logs_errors(project: Path) -> None:
    run_id = incomplete_run(project)
    assert_one_line_error(fks("logs", "last", "4", cwd=project), f"run {run_id} has 3 steps", "1-3")
    assert_one_line_error(
        fks("logs", "last", "2", "-i", "3", cwd=project), "ran iterations 1-2", "no iteration 3"
    )
    assert_one_line_error(fks("logs", "last", "3", "-i", "1", cwd=project), "ran no iterations")
    assert_one_line_error(fks("logs", "last", "-i", "1", cwd=project), "--iteration needs a STEP")
    single = new_run(project, "./scripts/ok.sh", code=0)
    assert_one_line_error(
        fks("logs", single, "2", cwd=project), f"run {single} has 1 step; STEP must be 1"
    )
    assert_one_line_error(
        fks("logs", single, "1", "-i", "2", cwd=project), "ran iteration 1;", "no iteration 2"
    )
    usage = fks("logs", "last", "0", cwd=project)  # typer's own range check
    assert usage.code == 2
    assert "Traceback" not in usage.output


def test_logs_follow_streams_a_running_run(
    project: Path, background: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run = background("./scripts/slow.sh:3", env={"GATE": str(gate)})
    wait_for(lambda: (project / ".forge" / "runs").is_dir() and bool(run_ids(project)))
    assert "running" in fks("runs", cwd=project).stdout.splitlines()[-3]
    follow = subprocess.Popen(
        [FKS, "logs", "last", "--follow"], cwd=project, stdout=subprocess.PIPE
    )
    assert follow.stdout is not None
    header = follow.stdout.readline()
    first = follow.stdout.readline()
    assert header == b"==> step 1 (./scripts/slow.sh) iteration 1 <==\n"
    assert first == "  │ tick A 1\n".encode()
    assert run.poll() is None, "output must arrive while the run is still going"
    gate.touch()
    rest, _ = follow.communicate(timeout=120)
    assert follow.returncode == 0
    assert run.wait(timeout=120) == 0
    followed = header + first + rest
    assert followed == fks_bytes("logs", "last", cwd=project)
    assert (
        "==> step 1 (./scripts/slow.sh) iteration 2 <==\n"
        "  │ tick A 2\n  │ tick B 2\n  │ FORKHESTRA_COMPLETE\n".encode()
        in followed
    )


def test_logs_follow_one_step_waits_for_it(
    project: Path, background: Callable[..., subprocess.Popen[bytes]]
) -> None:
    run = background("./scripts/slow.sh:3 -> ./scripts/ok.sh", env={"SLOW": "0.5"})
    wait_for(lambda: (project / ".forge" / "runs").is_dir() and bool(run_ids(project)))
    followed = subprocess.run(
        [FKS, "logs", "last", "2", "--follow"],
        cwd=project,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert run.wait(timeout=120) == 0
    assert followed.returncode == 0, followed.stderr
    assert (
        followed.stdout
        == "==> step 2 (./scripts/ok.sh) iteration 1 <==\n"
        "  │ ok output 1\n  │ FORKHESTRA_COMPLETE\n".encode()
    )


def test_follow_of_a_finished_run_prints_and_exits(project: Path) -> None:
    incomplete_run(project)
    assert fks_bytes("logs", "last", "--follow", cwd=project) == fks_bytes(
        "logs", "last", cwd=project
    )


# --- agent-written text is shown, never obeyed -------------------------------------------------

# Clipboard write (OSC 52), hyperlink (OSC 8), window title, screen clear, a bidi override.
HOSTILE = (
    r"\033]52;c;cm0gLXJmIH4=\007clip \033]8;;https:evil\033\\link\033]8;;\033\\ "
    r"\033]0;title\007\033[2J\033[Hcleared name\342\200\256gpj.sh"
)
HOSTILE_AGENT = f"""#!/bin/sh
printf '{HOSTILE}\\n'
echo '==> step 9 (./scripts/fake.sh) iteration 9 <=='
printf 'err {HOSTILE}\\n' >&2
exit 3
"""


def assert_neutralised(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert not any(c in text for c in "\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
    assert "name<U+202E>gpj.sh" in text


def test_show_and_logs_neutralise_agent_text(project: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord

    commit_scripts(project, {"hostile.sh": HOSTILE_AGENT})
    run_id = new_run(project, "./scripts/hostile.sh:2", code=1)
    path = project / ".forge" / "runs" / run_id / "run.json"
    rec = RunRecord.model_validate_json(path.read_text())
    rec.steps[0].branch = "fks/x/1-evil\u202egpj.sh"
    rec.steps[0].conflicts = ["name\u202egpj.sh"]
    write_atomic(path, rec.model_dump_json())

    shown = fks("show", run_id, cwd=project)
    assert shown.code == 0, shown.output
    assert_neutralised(shown.stdout)
    assert "stderr: err clip link cleared name<U+202E>gpj.sh" in shown.stdout
    assert "branch:     fks/x/1-evil<U+202E>gpj.sh (not merged)" in shown.stdout
    assert "conflicts:  name<U+202E>gpj.sh" in shown.stdout

    logs = fks("logs", run_id, cwd=project)
    assert logs.code == 0, logs.output
    assert_neutralised(logs.stdout)
    assert "err clip link cleared name<U+202E>gpj.sh\n" in logs.stdout
    headers = [line for line in logs.stdout.splitlines() if line.startswith("==>")]
    assert headers == [f"==> step 1 (./scripts/hostile.sh) iteration {n} <==" for n in (1, 2)]
    raw = fks_bytes("logs", run_id, "--raw", cwd=project)
    assert b"\x1b]52;c;cm0gLXJmIH4=\x07clip" in raw  # --raw: the bytes as written


def test_runs_neutralises_labels(project: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord

    run_id = complete_run(project)
    path = project / ".forge" / "runs" / run_id / "run.json"
    rec = RunRecord.model_validate_json(path.read_text())
    rec.options.dsl = "\x1b]0;title\x07ok\u202egpj.sh"
    write_atomic(path, rec.model_dump_json())
    listing = fks("runs", cwd=project)
    assert "\x1b" not in listing.stdout and "\u202e" not in listing.stdout
    assert "okgpj.sh" not in listing.stdout and "ok<U+202E>gpj.sh" in listing.stdout


def test_logs_cut_very_long_lines(project: Path) -> None:
    commit_scripts(
        project,
        {"long.sh": "#!/bin/sh\nhead -c 20000000 /dev/zero | tr '\\0' x\necho\necho after\n"},
    )
    run_id = new_run(project, "./scripts/long.sh", code=0)
    done = subprocess.run(
        [FKS, "logs", run_id], cwd=project, capture_output=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) < 10_000
    first, after = done.stdout.decode().splitlines()
    shown, cut = re.fullmatch(r"(x+)… \(([\d,]+) more bytes not shown\)", first).groups()  # type: ignore[union-attr]
    assert len(shown) + int(cut.replace(",", "")) == 20_000_000
    assert after == "after"
    assert len(fks_bytes("logs", run_id, "--raw", cwd=project)) == 20_000_000 + len("\nafter\n")


TRANSCRIPT = Path(__file__).parents[1] / "data" / "streamjson" / "tool_bash.jsonl"


def test_logs_of_a_claude_transcript_are_readable(project: Path) -> None:
    lines = TRANSCRIPT.read_text().splitlines()
    # A tool result and a text block carrying escape sequences, and a result of many lines.
    hostile = {"type": "tool_result", "tool_use_id": "t", "content": "\x1b]52;c;eA==\x07got\n" * 9}
    lines.insert(-1, json.dumps({"type": "user", "message": {"content": [hostile]}}))
    lines.insert(-1, json.dumps({"type": "assistant", "message": {"content": [
        {"type": "text", "text": "\x1b[2Jsaid\u202egpj.sh\nresult: success, 1 turn"}]}}))  # fmt: skip
    huge = {"type": "user", "message": {"content": [{"type": "text", "text": "y" * 9_000_000}]}}
    lines.insert(-1, json.dumps(huge))
    lines.insert(-1, "z" * 9_000_000)  # a line of the CLI's stderr
    (project / "transcript.jsonl").write_text("\n".join(lines) + "\n")
    commit_scripts(project, {"claudish.sh": "#!/bin/sh\ncat transcript.jsonl\necho oops >&2\n"})
    run_id = new_run(project, "./scripts/claudish.sh", code=0)
    done = fks("logs", run_id, cwd=project)
    assert done.code == 0, done.output
    out = done.stdout
    assert '{"type"' not in out and "\x1b" not in out
    assert out.startswith("session 633c830f-76ea-4a53-be59-de9813e917df, model claude-opus-4-8")
    assert (
        "  │ Writing the file.\n→ Bash: echo hi > f.txt\n  ← (Bash completed with no output)\n"
        in out
    )
    assert "→ Bash: cat f.txt\n  ← hi\n" in out
    assert "  ← got\n    got\n    got\n    … (6 more lines)\n" in out
    assert "  │ said<U+202E>gpj.sh\n  │ result: success, 1 turn\n" in out  # the agent's lines
    assert "\nresult: success, 1 turn" not in out
    assert re.search(
        r"\nresult: success, 3 turns, \d+\.\ds, \$0\.0040, 360 in / \d+ out tokens\n", out
    )
    assert "  │ oops\n" in out  # stderr lines as they are
    assert "\n(an event too long to show here, " in out
    assert "  │ zzzz" in out and "zzzz… (8,995,904 more bytes not shown)\n" in out
    assert len(out) < 20_000
    assert fks_bytes("logs", run_id, "--raw", cwd=project).startswith(b'{"type":"system"')


def _call(tool: str, tool_input: dict[str, object]) -> str:
    block = {"type": "tool_use", "id": "t", "name": tool, "input": tool_input}
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


LONG_COMMAND = (
    "python3 -m pytest tests/test_a_module_with_a_long_name.py -k 'one or two or three' -q\n"
    "git add -A && git commit -qm 'the second line of the command'\n"
    "echo \x1b]52;c;eA==\x07done\u202egpj.sh"
)


def test_logs_full_shows_tool_calls_and_results_whole_bounded_and_neutralised(
    project: Path,
) -> None:
    lines = TRANSCRIPT.read_text().splitlines()
    result = {"type": "tool_result", "tool_use_id": "t", "content": "\n".join(map(str, range(9)))}
    lines[-1:-1] = [
        _call("Bash", {"command": LONG_COMMAND}),
        _call("Edit", {"file_path": "src/app.py", "old_string": "a = 1", "new_string": "a = 2"}),
        _call("Write", {"file_path": "big.txt", "content": "w" * 50_000}),
        json.dumps({"type": "user", "message": {"content": [result]}}),
    ]
    (project / "transcript.jsonl").write_text("\n".join(lines) + "\n")
    commit_scripts(project, {"claudish.sh": "#!/bin/sh\ncat transcript.jsonl\n"})
    run_id = new_run(project, "./scripts/claudish.sh", code=0)

    short = fks("logs", run_id, cwd=project)
    assert short.code == 0, short.output
    assert (
        "→ Bash: python3 -m pytest tests/test_a_module_with_a_long_name.py -k 'one or two or t"
        in (short.stdout)
    )
    assert "git commit -qm 'the second line" not in short.stdout  # cut to one line
    assert "→ Edit: src/app.py\n" in short.stdout and "new_string" not in short.stdout

    for flag in ("--full", "-w"):
        full = fks("logs", run_id, flag, cwd=project)
        assert full.code == 0, full.output
        out = full.stdout
        assert "\x1b" not in out and "\u202e" not in out
        assert (
            "    python3 -m pytest tests/test_a_module_with_a_long_name.py -k 'one or two or three' -q\n"
            "    git add -A && git commit -qm 'the second line of the command'\n"
            "    echo done<U+202E>gpj.sh\n"
        ) in out
        assert '→ Edit: src/app.py\n    {\n      "file_path": "src/app.py",\n' in out
        assert '      "new_string": "a = 2"\n    }\n' in out
        assert "\n  ←\n    0\n    1\n" in out and "    8\n" in out  # the result, all of it
        assert "→ Bash: echo hi > f.txt\n  ← (Bash completed with no output)\n" in out  # whole
        assert " more characters; `fks logs --raw` has them)" in out
        assert len(out) < 30_000  # the 50,000-character call is cut at 20,000
    both = fks("logs", run_id, "--full", "--raw", cwd=project)
    assert both.code == 2
    assert (
        both.stderr == "fks: --full goes without --raw, which prints the bytes as written anyway\n"
    )
