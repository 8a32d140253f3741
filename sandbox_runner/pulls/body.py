"""What a pull request says, written by fks: what ran, each step's iterations and end, the
cost, the commits, the egress audit's summary and how to reproduce the run.

Everything an agent could have written (commit subjects, reasons, task text, host names) goes
in as `code(...)`: one line without escapes, controls or bidi tricks, cut to a bound, inside a
code span, where GitHub renders no mention, link, image or HTML. The whole body stays under
GitHub's limit.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sandbox_runner import __version__
from sandbox_runner.console.shown import one_line
from sandbox_runner.records.record import RunRecord, StepRecord

BODY_LIMIT = 60_000
"""Characters of a body at most (GitHub refuses more than 65,536)."""
TITLE_LIMIT = 200
SHOWN_COMMITS = 100
_ITEM = 300
_BACKTICKS = re.compile(r"`+")


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


def code(text: str, limit: int = _ITEM) -> str:
    """`text` as inert Markdown: one bounded line in a code span (its fence longer than any run
    of backticks inside), `|` escaped so it cannot split a table cell."""
    flat = one_line(text[: limit * 8], limit) or " "  # what is shown: escapes are cut after
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat.replace('|', chr(92) + '|')}{pad}{fence}"


def title_text(text: str) -> str:
    """A pull request's title: one bounded line, every `@` kept from pinging anyone."""
    return one_line(text[: TITLE_LIMIT * 8], TITLE_LIMIT).replace("@", "@\u200d")


def run_body(
    record: RunRecord, commits: Sequence[Commit], more_commits: bool, reproduce: str
) -> str:
    """The body of the pull request of run `record` (`commits`: those of its branch)."""
    parts = [
        f"Opened by fks from run {code(record.id)} ({code(record.label)}), started from "
        f"{code(record.base_branch or '?')} at {code((record.base_commit or '?')[:12])}.",
        f"**Status:** {code(str(record.status))}"
        + (f", {code(str(record.reason))}" if record.reason else ""),
        _steps_table(record.steps),
        f"**Cost:** {_usd(record.cost_usd)}",
        _commits(commits, more_commits),
        _network(record.steps),
        "### Reproduce\n\n" + fenced(reproduce),
    ]
    return bounded("\n\n".join(parts) + f"\n\n<sub>fks {__version__}</sub>\n")


def reproduce(record: RunRecord) -> str:
    """The commands that run it again and show this run."""
    options = record.options
    what = ["--chain", options.chain] if options.chain else [options.dsl or "?"]
    pairs = [f"{k}={v}" for k, v in options.variables.items()]
    again = shlex.join(["fks", "run", *what, *pairs, "--sandbox", "--pr"])
    return f"{again}\nfks show {record.id}"


def fenced(text: str) -> str:
    """A fenced code block of `text` (fks's own: escapes and controls removed all the same)."""
    lines = [one_line(line, 1000) for line in text.splitlines()]
    fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    return f"{fence}\n" + "\n".join(lines) + f"\n{fence}"


def bounded(body: str) -> str:
    """`body` cut to `BODY_LIMIT` at a line's end, saying so."""
    if len(body) <= BODY_LIMIT:
        return body
    cut = body.rfind("\n", 0, BODY_LIMIT - 100)
    return body[: max(cut, 0)] + "\n\n(cut: the rest is in the run record)\n"


def _usd(value: float) -> str:
    return f"${value:.4f}" if value else "$0 (none reported)"


def _steps_table(steps: Iterable[StepRecord]) -> str:
    rows = ["| Step | Agent | Iterations | Ended | Cost |", "|---|---|---|---|---|"]
    for step in steps:
        ended = f"{step.status}: {step.reason}" if step.reason else str(step.status)
        reasons = Counter(str(it.reason) for it in step.iterations if it.reason)
        ends = ", ".join(f"{reason} ×{n}" if n > 1 else reason for reason, n in reasons.items())
        rows.append(
            f"| {step.index} | {code(step.agent, 80)} "
            f"| {step.iterations_used}/{step.iterations_max} "
            f"| {code(ended, 120)} "
            f"(iterations: {code(ends or 'none', 200)}) | {_usd(step.cost_usd)} |"
        )
    return "### Steps\n\n" + "\n".join(rows)


def _commits(commits: Sequence[Commit], more: bool) -> str:
    lines = [f"- {code(c.sha, 12)} {code(c.subject, 200)}" for c in commits[:SHOWN_COMMITS]]
    if more:
        lines.append("- … and more (`git log` shows them all)")
    return f"### Commits ({len(commits)}{'+' if more else ''})\n\n" + ("\n".join(lines) or "(none)")


def _network(steps: Iterable[StepRecord]) -> str:
    """The egress audit's summary: requests through the proxy, refused ones, top destinations."""
    total = refused = 0
    hosts: Counter[str] = Counter()
    for step in steps:
        for it in step.iterations:
            if it.network is not None:
                total += it.network.total
                for req in it.network.requests:
                    hosts[req.host] += req.count
                    refused += req.count if req.result == "TCP_DENIED" else 0
            refused += sum(d.count for d in it.denied) if it.network is None else 0
    if not total and not refused:
        return "### Network\n\nNo request through the egress proxy was recorded."
    top = ", ".join(f"{code(host, 80)} ×{n}" for host, n in hosts.most_common(5))
    return (
        f"### Network\n\n{total} request(s) through the egress proxy, {refused} refused"
        + (f"; most to {top}" if top else "")
        + "."
    )


@dataclass(frozen=True)
class TaskSummary:
    """What a forge task's pull request says of it (every text as the task and review have it:
    neutralised here)."""

    task_id: str
    title: str
    criteria: Sequence[str]
    approved: bool
    issues: Sequence[str]
    suggestions: Sequence[str]
    cost_usd: float
    runs: Sequence[str]


def task_body(task: TaskSummary, commits: Sequence[Commit], more_commits: bool) -> str:
    """The body of a forge task's pull request: the task, its acceptance criteria, the review's
    verdict, the cost, the commits and how to look at its runs."""
    criteria = [f"- {code(c, 500)}" for c in task.criteria[:50]] or ["(none given)"]
    verdict = "approved" if task.approved else "not approved"
    notes = [f"- {code(i, 500)}" for i in [*task.issues, *task.suggestions][:50]]
    parts = [
        f"Opened by fks forge for task {code(task.task_id, 80)}: {code(task.title, 500)}.",
        "### Acceptance criteria\n\n" + "\n".join(criteria),
        f"### Review\n\n**Verdict:** {verdict}" + ("\n\n" + "\n".join(notes) if notes else ""),
        f"**Cost:** {_usd(task.cost_usd)}",
        _commits(commits, more_commits),
        "### Look closer\n\n"
        + fenced("\n".join([*(f"fks show {run}" for run in task.runs[-5:]), "fks forge status"])),
    ]
    return bounded("\n\n".join(parts) + f"\n\n<sub>fks {__version__}</sub>\n")
