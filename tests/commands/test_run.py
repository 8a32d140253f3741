"""`fks run` driven as a user would: real processes (the fake agent), exit codes, output, files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fks_testing.helpers import calls, fks, write_config


def run(cli: object, *args: str) -> object:
    return cli(*args)  # type: ignore[operator]


def test_loop_until_marker(project: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "3")
    res = cli("run", "fake:5")
    assert res.code == 0, res.output
    assert len(calls(project.parent)) == 3
    out = res.stdout
    assert "[fks] Starting: fake (max 5 iterations)" in out
    assert "[fks] Iteration 1/5" in out and "[fks] Iteration 3/5" in out
    assert "[fks] Iteration 4/5" not in out
    assert "fake agent iteration 2" in out  # agent output streams through
    assert "[fks] Complete after 3 iterations" in out
    assert "[fks] Chain complete (1/1 steps)" in out


def test_once_needs_no_marker(project: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "0")
    res = cli("run", "fake -> builder")
    assert res.code == 0, res.output
    assert len(calls(project.parent)) == 2
    assert "[fks] Running: fake" in res.stdout
    assert "[fks] Done: fake (exit 0)" in res.stdout
    assert "[fks] Chain complete (2/2 steps)" in res.stdout
    assert "Pipeline" not in res.output
    assert "Iteration" not in res.stdout


@pytest.mark.parametrize(
    ("dsl", "marker_at", "code", "last"),
    [
        ("fake", "0", 0, "[fks] Chain complete (1/1 steps)"),
        ("fake -> builder", "0", 0, "[fks] Chain complete (2/2 steps)"),
        ("fake:3 -> builder", "1", 0, "[fks] Chain complete (2/2 steps)"),
        ("builder -> fake:2", "0", 1, "[fks] Chain incomplete (1/2 steps)"),
    ],
)
def test_every_run_ends_with_one_closing_line_for_scripts(
    project: Path,
    cli,
    monkeypatch: pytest.MonkeyPatch,
    dsl: str,
    marker_at: str,
    code: int,
    last: str,
) -> None:
    """Whatever its steps (once, looping, mixed), a run's last line reads the same way: one
    pattern for CI and scripts to match; with --json it is the last line on stderr."""
    monkeypatch.setenv("FAKE_MARKER_AT", marker_at)
    res = cli("run", dsl)
    assert res.code == code, res.output
    assert res.stdout.rstrip("\n").splitlines()[-1] == last, res.stdout
    assert "Pipeline" not in res.output
    res = cli("run", dsl, "--json")
    assert res.code == code, res.output
    assert res.stderr.rstrip("\n").splitlines()[-1] == last, res.stderr


def test_incomplete_step_exits_1_and_says_which(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "0")
    res = cli("run", "fake:3 -> builder")
    assert res.code == 1
    recorded = calls(project.parent)
    assert len(recorded) == 3  # builder never ran
    assert all(c["argv"][0].endswith("fake_agent.py") for c in recorded)
    assert "Step 1 (fake) did not complete" in res.stdout
    assert "3/3 iterations" in res.stdout
    assert "[fks] Chain incomplete (0/2 steps)" in res.stdout


def test_a_step_whose_agent_failed_alike_every_time_names_that_not_the_marker(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "0")
    monkeypatch.setenv("FAKE_EXIT", "3")
    res = cli("run", "fake:2")
    assert res.code == 1, res.output
    why = "stopped after 2/2 iterations: the agent exited 3 every time (exit_3)"
    assert f"[fks] Incomplete: fake {why}: its output is in fks logs" in res.stdout, res.stdout
    assert f"[fks] Step 1 (fake) did not complete: {why}" in res.stdout
    assert "did not print the marker" not in res.stdout
    monkeypatch.setenv("FAKE_EXIT_UNTIL", "2")  # the second one exits 0: not alike
    res = cli("run", "fake:2")
    assert res.code == 1 and "did not print the marker in 2/2 iterations" in res.stdout


@pytest.mark.parametrize(
    ("how", "detected"),
    [
        ("line", True),
        ("indented", True),
        ("nonewline", True),
        ("stderr", False),
        ("sentence", False),
    ],
)
def test_marker_only_on_its_own_stdout_line(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch, how: str, detected: bool
) -> None:
    monkeypatch.setenv("FAKE_MARKER_HOW", how)
    res = cli("run", "fake:2")
    assert (res.code == 0) is detected, res.output
    assert len(calls(project.parent)) == (1 if detected else 2)


def test_nonzero_exit_continues_to_next_iteration(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "3")
    monkeypatch.setenv("FAKE_EXIT", "1")
    monkeypatch.setenv("FAKE_EXIT_UNTIL", "3")
    monkeypatch.setenv("FAKE_STDERR", "boom")
    res = cli("run", "fake:5")
    assert res.code == 0, res.output
    assert len(calls(project.parent)) == 3


def test_chain_stops_at_first_incomplete_step_json(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "0")
    res = cli("run", "fake -> builder:2 -> reviewer", "--json")
    assert res.code == 1
    data = json.loads(res.stdout)  # stdout holds only the JSON
    assert data["success"] is False
    assert data["failed_at"] == 2
    assert [s["agent"] for s in data["steps"]] == ["fake", "builder"]
    assert data["steps"][0]["complete"] is True and data["steps"][0]["reason"] == "once"
    assert data["steps"][1]["iterations"] == 2 and data["steps"][1]["reason"] == "max_iterations"
    assert "[fks] Starting: builder (max 2 iterations)" in res.stderr
    assert len(calls(project.parent)) == 3


def test_prompt_is_last_argument_and_same_each_iteration(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "2")
    res = cli("run", "fake:3", "-p", "Create tasks from plan.md")
    assert res.code == 0, res.output
    prompts = [c["args"] for c in calls(project.parent)]
    assert prompts == [["Create tasks from plan.md"]] * 2


def test_config_chain_prompts_args_vars_and_global_args(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "prompts").mkdir()
    (project / "prompts" / "build-auth.md").write_text("Build the auth feature")
    write_config(
        project,
        {
            "agents": {
                "fk:builder": {"path": "builder", "defaultPrompt": "agent default"},
                "reviewer": {"defaultPrompt": "Review ${NOT_SUBSTITUTED_IN_AGENT_DEFAULTS}"},
            },
            "chains": {
                "work": {
                    "description": "plan then build",
                    "prompt": "Work on ${FEATURE}",
                    "steps": [
                        {"agent": "planner", "iterations": 2, "args": ["--task", "${TASK_ID}"]},
                        {"agent": "fk:builder", "promptFile": "prompts/build-${FEATURE}.md"},
                        {"agent": "reviewer", "prompt": "Step prompt"},
                    ],
                }
            },
        },
    )
    res = cli("run", "--chain", "work", "TASK_ID=T-7", "FEATURE=auth", "--", "--global", "g")
    assert res.code == 0, res.output
    got = [c["args"] for c in calls(project.parent)]
    assert got == [
        ["--global", "g", "--task", "T-7", "Work on auth"],
        ["--global", "g", "Build the auth feature"],
        ["--global", "g", "Step prompt"],
    ]


def test_the_command_runs_from_one_frozen_options_object(
    project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`fks run` in-process: the typer function only builds a RunRequest and passes it on."""
    from sandbox_runner.commands.run import RunRequest
    from sandbox_runner.commands.run import run as run_chain

    monkeypatch.setenv("FAKE_MARKER_AT", "2")
    request = RunRequest(
        targets=("fake:3",), cwd=project, prompt="go", global_args=("--global", "g")
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_cost = 1.0  # type: ignore[misc]
    assert run_chain(request) == 0
    assert [c["args"] for c in calls(project.parent)] == [["--global", "g", "go"]] * 2
    assert "[fks] Complete after 2 iterations" in capfd.readouterr().out


def test_cli_prompt_overrides_everything_and_agent_default_is_fallback(project: Path, cli) -> None:
    write_config(
        project,
        {
            "agents": {"fake": {"defaultPrompt": "default for fake"}},
            "chains": {"c": {"steps": [{"agent": "fake"}, {"agent": "builder", "prompt": "step"}]}},
        },
    )
    assert cli("run", "--chain", "c").code == 0
    assert [c["prompt"] for c in calls(project.parent)] == ["default for fake", "step"]
    assert cli("run", "--chain", "c", "-p", "override").code == 0
    assert [c["prompt"] for c in calls(project.parent)][2:] == ["override", "override"]


def test_prompt_file_is_reread_every_iteration(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = project / "prompt.md"
    prompt.write_text("prompt v1")
    monkeypatch.setenv("FAKE_MARKER_AT", "3")
    monkeypatch.setenv("FAKE_WRITE_PROMPT", str(prompt))
    res = cli("run", "fake:3", "--prompt-file", "prompt.md")
    assert res.code == 0, res.output
    assert [c["prompt"] for c in calls(project.parent)] == ["prompt v1", "prompt v2", "prompt v3"]


def test_cwd_and_config_options(project: Path, cli, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    cfg = tmp_path / "my-chains.json"
    cfg.write_text(json.dumps({"chains": {"x": {"steps": [{"agent": "fake", "prompt": "hi"}]}}}))
    res = cli("run", "--chain", "x", "--cwd", str(other), "--config", str(cfg))
    assert res.code == 0, res.output
    (call,) = calls(tmp_path)
    assert Path(call["cwd"]) == other
    assert (other / ".forge" / "runs").is_dir()


def test_agent_names_with_colons_and_paths(
    project: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MARKER_AT", "2")
    write_config(project, {"agents": {"fk:builder": {"path": "builder"}}})
    res = cli("run", "fk:builder:3")
    assert res.code == 0, res.output
    assert "Starting: fk:builder (max 3 iterations)" in res.stdout
    script = project / "bin" / "agent.sh"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\necho from-script "$@"\necho FORKHESTRA_COMPLETE\n')
    script.chmod(0o755)
    res = cli("run", "./bin/agent.sh:2", "-p", "go")
    assert res.code == 0, res.output
    assert "from-script go" in res.stdout


def test_dry_run_shows_everything_and_runs_nothing(project: Path, cli) -> None:
    write_config(
        project,
        {
            "chains": {
                "c": {
                    "prompt": "chain prompt",
                    "steps": [
                        {"agent": "planner", "iterations": 3},
                        {"agent": "builder", "args": ["--x"]},
                    ],
                }
            }
        },
    )
    res = cli("run", "--chain", "c", "--dry-run")
    assert res.code == 0, res.output
    out = res.stdout
    assert "[fks] Dry run - would execute:" in out
    assert "Step 1: planner (max 3 iterations)" in out
    assert "Step 2: builder (once)" in out
    assert "prompt:  chain prompt  [chain]" in out
    assert "/planner 'chain prompt'" in out
    assert "/builder --x 'chain prompt'" in out
    assert f"cwd:     {project}" in out
    assert calls(project.parent) == []
    assert not (project / ".forge").exists()
    data = json.loads(cli("run", "--chain", "c", "--dry-run", "--json").stdout)
    assert data["steps"][0]["argv"][-1] == "chain prompt"


# --- the error table of the design (seed 003), each as the user sees it -----------------------


def assert_one_line_error(res, code: int, fragment: str) -> None:
    assert res.code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("fks: ")
    assert fragment in lines[0]
    assert "Traceback" not in res.output


def test_error_agent_not_found(project: Path) -> None:
    res = fks("run", "no-such-agent:3")
    assert_one_line_error(res, 2, "Agent 'no-such-agent' not found on PATH")


def test_error_agent_not_found_in_later_step_fails_before_anything_runs(project: Path) -> None:
    res = fks("run", "fake -> missing-one")
    assert_one_line_error(res, 2, "missing-one")
    assert calls(project.parent) == []


def test_error_invalid_json(project: Path) -> None:
    (project / "forge").mkdir()
    (project / "forge" / "chains.json").write_text("{ not json")
    res = fks("run", "--chain", "x")
    assert_one_line_error(res, 2, "forge/chains.json: invalid JSON at line 1")


def test_error_chain_not_found_lists_available(project: Path) -> None:
    write_config(
        project,
        {
            "chains": {
                "alpha": {"steps": [{"agent": "fake"}]},
                "beta": {"steps": [{"agent": "fake"}]},
            }
        },
    )
    res = fks("run", "--chain", "gamma")
    assert_one_line_error(
        res, 2, "Chain 'gamma' not found in forge/chains.json; available chains: alpha, beta"
    )


def test_error_missing_variables_all_listed(project: Path) -> None:
    write_config(
        project,
        {
            "chains": {
                "c": {"steps": [{"agent": "fake", "args": ["${A}", "${B}"], "prompt": "${C} ${A}"}]}
            }
        },
    )
    res = fks("run", "--chain", "c", "B=1")
    assert_one_line_error(res, 2, "needs variable(s) not provided: A, C")


def test_error_step_does_not_complete(project: Path) -> None:
    res = fks("run", "fake:2", env={"FAKE_MARKER_AT": "0"})
    assert res.code == 1
    assert "Step 1 (fake) did not complete" in res.stdout
    assert "2/2 iterations" in res.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", "a:0"], "iterations must be a positive integer"),
        (["run", "a ->"], "empty step"),
        (["run"], "nothing to run"),
        (["run", "--chain", "c"], "forge/chains.json not found"),
        (["run", "fake", "-p", "x", "--prompt-file", "y"], "either --prompt or --prompt-file"),
        (["run", "fake", "--prompt-file", "nope.md"], "--prompt-file 'nope.md' does not exist"),
        (["run", "fake", "--prompt-file", "/"], "--prompt-file '/' is a directory"),
        (["chains"], "forge/chains.json not found; fks chains needs a config"),
        (["validate"], "forge/chains.json not found; fks validate needs a config"),
        (["run", "fake", "--cwd", "/nonexistent/dir"], "not a directory"),
        (["run", "fake", "NOTAPAIR"], "VAR=value"),
    ],
)
def test_usage_errors_exit_2(project: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(fks(*args), 2, fragment)


def test_chains_validate_version(project: Path, cli) -> None:
    write_config(
        project,
        {
            "chains": {
                "ralph": {
                    "description": "plan then build",
                    "steps": [{"agent": "planner", "iterations": 3}, {"agent": "builder"}],
                },
                "t": {"steps": [{"agent": "fake", "args": ["${TASK}"]}]},
            }
        },
    )
    res = cli("chains")
    assert res.code == 0
    assert "ralph  plan then build" in res.stdout
    assert "planner:3 -> builder" in res.stdout
    res = cli("validate")
    assert res.code == 0 and "OK (0 agents, 2 chains)" in res.stdout
    assert "chain 't' needs: TASK" in res.stdout
    write_config(project, {"chains": {"bad": {"steps": [{"agent": "x", "iterations": -1}]}}})
    assert_one_line_error(
        fks("validate"), 2, "chains.bad.steps[0].iterations: must be a positive integer"
    )
    assert fks("--version").stdout.startswith("fks ")


def test_shell_completion_is_available(project: Path) -> None:
    # The shell is named: with no shell among fks's parents (a detached CI job), typer's
    # detection would find none.
    res = fks(
        "--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    )
    assert res.code == 0, res.output
    assert "_FKS_COMPLETE" in res.stdout


def test_help_lists_commands() -> None:
    res = fks("--help")
    assert res.code == 0
    for verb in (
        "run",
        "chains",
        "validate",
        "init",
        "runs",
        "show",
        "logs",
        "review",
        "clean",
        "image",
        "tasks",
    ):
        assert verb in res.stdout
    assert "--dry-run" in fks("run", "--help").stdout


def test_a_run_whose_agent_cannot_start_leaves_no_record(project: Path) -> None:
    agent = project / "agent.sh"
    agent.write_text("#!/opt/no-such-interpreter\n")
    agent.chmod(0o755)
    res = fks("run", "./agent.sh:2", cwd=project)
    assert res.code == 2, res.output
    assert "cannot run" in res.stderr and "Traceback" not in res.output
    runs = project / ".forge" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
    res = fks("run", "fake -> ./agent.sh", cwd=project)  # a later step: the run is kept
    assert res.code == 2, res.output
    (run_dir,) = runs.iterdir()
    rec = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in rec["steps"]] == ["complete", "failed"]
    assert rec["steps"][1]["iterations"] == []  # its agent never ran
    assert [p.name for p in run_dir.iterdir() if p.is_dir()] == ["01-fake"]
