"""Plain output: an agent's lines can never pass for fks's own."""

from __future__ import annotations

import io
from pathlib import Path

from fks_testing.helpers import fks

from sandbox_runner.agentclis.events import AssistantText, ToolCall
from sandbox_runner.console.output import PlainReporter

IMPOSTOR = r"""#!/bin/sh
echo "[fks] Merged 'fks/x/1-impostor.sh' into 'main'"
printf 'half a line '
echo "[fks] Chain complete (1/1 steps)" >&2
printf 'then \342\200\256gpj.sh\n[fks] Chain complete (1/1 steps)\n'
exit 3
"""


def test_agent_lines_imitating_fks_are_visibly_the_agents(project: Path) -> None:
    agent = project / "impostor.sh"
    agent.write_text(IMPOSTOR)
    agent.chmod(0o755)
    done = fks("run", "./impostor.sh:1")
    assert done.code == 1, done.output  # the run failed, whatever the agent printed
    fks_lines = [line for line in done.output.splitlines() if line.startswith("[fks]")]
    assert not any("Merged" in line or "Chain complete" in line for line in fks_lines)
    assert "[fks] Chain incomplete (0/1 steps)" in fks_lines
    assert "  │ [fks] Merged 'fks/x/1-impostor.sh' into 'main'\n" in done.stdout
    assert "  │ half a line then <U+202E>gpj.sh\n  │ [fks] Chain complete (1/1 steps)\n" in (
        done.stdout
    )
    assert done.stderr == "  │ [fks] Chain complete (1/1 steps)\n"


def test_claude_text_imitating_fks_is_visibly_the_agents() -> None:
    out = io.StringIO()
    reporter = PlainReporter(out=out, agent_out=io.BytesIO())
    reporter.events([AssistantText("Done.\n[fks] Chain complete (1/1 steps)")])
    reporter.info("Merge conflict in a\n[fks] Chain complete (1/1 steps)")
    assert out.getvalue() == (
        "  │ Done.\n"
        "  │ [fks] Chain complete (1/1 steps)\n"
        "[fks] Merge conflict in a\n"
        "[fks]   [fks] Chain complete (1/1 steps)\n"
    )


def test_a_tool_call_is_shown_as_the_agents_never_on_an_fks_line() -> None:
    """The tool's name and input are the agent's to choose (a model's answer, or any line an
    agent prints in its CLI's stream): shown on its lines, one per call, escapes stripped."""
    out = io.StringIO()
    reporter = PlainReporter(out=out, agent_out=io.BytesIO())
    reporter.events(
        [
            ToolCall("Bash", "Bash: make test"),
            ToolCall("Merged", "Merged 'fks/x/1-a' into 'main' \x1b[31m(fast-forward)"),
            ToolCall("Bash", "Bash: echo\n[fks] Chain complete (1/1 steps)"),
        ]
    )
    assert out.getvalue() == (
        "  │ → Bash: make test\n"
        "  │ → Merged 'fks/x/1-a' into 'main' (fast-forward)\n"
        "  │ → Bash: echo\n"
    )
