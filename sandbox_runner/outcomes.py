"""How iterations, steps, runs and forge tasks end: the reasons and statuses their records keep,
each reason with its text for people and its fix, and the groupings the step loop decides by.

Every layer reads them from here (the loop, the records, the terminal, the web view, JUnit,
`docs/claude.md`'s table of end reasons); this module imports nothing from the package. A
member is the string `run.json` spells (a `StrEnum`), so records keep their form and old ones
load as they are.
"""

from __future__ import annotations

import contextlib
import re
from enum import StrEnum
from typing import NamedTuple


class About(NamedTuple):
    """What an end means to a person, and what to do about it (None: nothing to do)."""

    text: str
    fix: str | None = None


class IterationEnd(StrEnum):
    """Why an iteration ended (`reason` of an iteration in run.json); the agent's own exit
    code is the other kind (`Exit`, `exit_N`)."""

    MARKER = "marker"
    ONCE = "once"
    NO_MARKER = "no_marker"
    MAX_TURNS = "max_turns"
    AUTH_ERROR = "auth_error"
    API_UNREACHABLE = "api_unreachable"
    BUDGET = "budget"
    STALLED = "stalled"
    TIMEOUT = "timeout"
    OOM = "oom"
    RATE_LIMITED = "rate_limited"
    IS_ERROR = "is_error"
    EXPORT_FAILED = "export_failed"
    KILLED = "killed"
    INTERRUPTED = "interrupted"
    ERROR = "error"

    @property
    def text(self) -> str:
        return _ITERATION_ENDS[self].text

    @property
    def fix(self) -> str | None:
        return _ITERATION_ENDS[self].fix


_RESUME = "fks run --resume RUN"
_ITERATION_ENDS = {
    IterationEnd.MARKER: About("the agent printed the completion marker"),
    IterationEnd.ONCE: About(
        "the one iteration of a step without :N ended (the step is done, whatever the exit code)"
    ),
    IterationEnd.NO_MARKER: About(
        "an iteration of a looping step ended without the marker; the next one follows"
    ),
    IterationEnd.MAX_TURNS: About(
        "hit the turn limit",
        "raise the agent's maxTurns in forge/chains.json, or give it a smaller task",
    ),
    IterationEnd.AUTH_ERROR: About(
        "the API refused the credentials",
        "check the agent's key: ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (Claude, OpenCode),"
        " OPENAI_API_KEY (Codex), GEMINI_API_KEY (Gemini CLI)",
    ),
    IterationEnd.API_UNREACHABLE: About(
        "the API could not be reached",
        "check the network and the agent's API address: ANTHROPIC_BASE_URL (Claude, OpenCode),"
        " OPENAI_BASE_URL (Codex), GOOGLE_GEMINI_BASE_URL (Gemini CLI)",
    ),
    IterationEnd.BUDGET: About(
        "it reached what was left of --max-cost (or the agent's own --max-budget-usd)",
        f"continue with a larger budget: {_RESUME} --max-cost USD",
    ),
    IterationEnd.STALLED: About(
        "stalled, printing nothing",
        "if the agent really works that long in silence, raise stallTimeout in "
        "forge/chains.json (0: off)",
    ),
    IterationEnd.TIMEOUT: About(
        "timed out", "raise sandbox.timeout in forge/chains.json, or give it a smaller task"
    ),
    IterationEnd.OOM: About("ran out of memory", "raise sandbox.memory in forge/chains.json"),
    IterationEnd.RATE_LIMITED: About(
        "the API answered with a rate-limit/overload error",
        "none needed: fks waits it out (up to rateLimitMaxWait) without using up the iteration",
    ),
    IterationEnd.IS_ERROR: About(
        "ended with an error from its agent CLI", "its notes are in fks show"
    ),
    IterationEnd.EXPORT_FAILED: About(
        "its commits could not be taken out of the sandbox; the base branch was not touched",
        "its note in fks show says why",
    ),
    IterationEnd.KILLED: About(
        "fks was killed while it ran (it counts as used)", f"{_RESUME} continues the run"
    ),
    IterationEnd.INTERRUPTED: About(
        "interrupted (Ctrl-C or a signal); it does not count", f"{_RESUME} runs it again"
    ),
    IterationEnd.ERROR: About(
        "fks failed while it ran; the run failed with it",
        "the error fks printed (the run's reason in fks show) says why",
    ),
}


class Exit(str):
    """`exit_N`: the agent exited N (not 0) and nothing else says why."""

    __slots__ = ()
    ABOUT = About("the agent exited N", "its output is in fks logs")
    _FORM = re.compile(r"exit_(-?[0-9]{1,12})")

    def __new__(cls, code: int) -> Exit:
        return super().__new__(cls, f"exit_{code}")

    def __reduce__(self) -> tuple[type[Exit], tuple[int]]:
        return (Exit, (self.code,))

    @classmethod
    def parse(cls, text: str) -> Exit | None:
        """`exit_N` as run.json spells it (None: `text` is no exit code)."""
        found = cls._FORM.fullmatch(text)
        return None if found is None else cls(int(found[1]))

    @property
    def code(self) -> int:
        return int(self.removeprefix("exit_"))

    @property
    def text(self) -> str:
        return f"the agent exited {self.code}"

    @property
    def fix(self) -> str | None:
        return self.ABOUT.fix


class StepEnd(StrEnum):
    """Why a step ended when its last iteration's reason is not why (`reason` of a step in
    run.json; otherwise that is its last iteration's reason)."""

    MAX_ITERATIONS = "max_iterations"
    MAX_COST = "max_cost"
    NO_PROGRESS = "no_progress"
    REPEATED_ERROR = "repeated_error"
    MERGE_CONFLICT = "merge_conflict"
    MERGE_BLOCKED = "merge_blocked"
    LANDED_ON_RESUME = "landed_on_resume"

    @property
    def text(self) -> str:
        return _STEP_ENDS[self].text

    @property
    def fix(self) -> str | None:
        return _STEP_ENDS[self].fix


_STEP_ENDS = {
    StepEnd.MAX_ITERATIONS: About(
        "did not print the marker in its iterations", f"allow more: {_RESUME} --more N"
    ),
    StepEnd.MAX_COST: About(
        "--max-cost was reached", f"continue with a larger budget: {_RESUME} --max-cost USD"
    ),
    StepEnd.NO_PROGRESS: About(
        "no commit and no file change in the last ones",
        "give it a smaller task, or raise noProgressLimit (0: off)",
    ),
    StepEnd.REPEATED_ERROR: About(
        "the same error repeated",
        "the error is in fks show; a noProgressLimit of 0 turns the breaker off",
    ),
    StepEnd.MERGE_CONFLICT: About(
        "its branch conflicts with the base branch, which was left untouched",
        f"resolve the conflict on the base branch, then {_RESUME} merges it (or git merge "
        "BRANCH yourself)",
    ),
    StepEnd.MERGE_BLOCKED: About(
        "its branch could not be merged into the base branch",
        f"once what blocked it is out of the way: {_RESUME} (or git merge BRANCH)",
    ),
    StepEnd.LANDED_ON_RESUME: About("resumed, only its merge was left: no agent ran"),
}

Reason = IterationEnd | StepEnd | Exit
"""Why an iteration or a step ended."""


def parse_reason(text: str) -> Reason | str:
    """A reason as run.json spells it; other text (a failed step's error, a reason of an older
    fks) stays as it is."""
    for kind in (IterationEnd, StepEnd):
        with contextlib.suppress(ValueError):
            return kind(text)
    return Exit.parse(text) or text


STOPS_THE_STEP = frozenset(
    {IterationEnd.AUTH_ERROR, IterationEnd.API_UNREACHABLE, IterationEnd.BUDGET}
)
"""Iteration ends that another iteration cannot fix: the step stops at once."""
CUT_OFF = frozenset({IterationEnd.TIMEOUT, IterationEnd.STALLED, IterationEnd.OOM})
"""A limit ended the agent (the sandbox's time or memory, fks's stall watch): a step without
:N ends incomplete for the same reason."""
ENDS_A_STEP_WITHOUT_N = CUT_OFF | {IterationEnd.RATE_LIMITED, IterationEnd.BUDGET}
"""Iteration ends after which even a step without :N is incomplete (fks or the machine ended
the agent, it did not finish)."""
UNCOUNTED = frozenset({IterationEnd.RATE_LIMITED, IterationEnd.INTERRUPTED})
"""Iteration ends that do not use up an iteration: a rate-limit answer is waited out (it
counts once fks gives up waiting), and `--resume` runs an interrupted one again."""
FINISHED = frozenset({IterationEnd.MARKER, IterationEnd.ONCE})
"""The agent finished: nothing failed."""
CUT_SHORT = frozenset({IterationEnd.INTERRUPTED, IterationEnd.KILLED})
"""fks stopped (a signal) or was killed while the iteration ran."""
RAN_OUT = frozenset({StepEnd.MAX_ITERATIONS, StepEnd.NO_PROGRESS, StepEnd.REPEATED_ERROR})
"""Step ends after iterations that each ended without the marker: their common cause is named."""
NOT_LANDED = frozenset({StepEnd.MERGE_CONFLICT, StepEnd.MERGE_BLOCKED})
"""The step's agent finished, but its work could not land: resumed, it is only merged."""
ALIKE = frozenset(
    {
        IterationEnd.MAX_TURNS,
        IterationEnd.TIMEOUT,
        IterationEnd.OOM,
        IterationEnd.STALLED,
        IterationEnd.IS_ERROR,
    }
)
"""Iteration ends (with `Exit`) named as the cause of a step whose every iteration ended so."""


def stops_step_as(reason: Reason) -> Reason:
    """The reason of a step that an iteration ending for `reason` stops (`STOPS_THE_STEP`): a
    budget stop is the step's `max_cost`, whether the iteration or the chain saw it."""
    return StepEnd.MAX_COST if reason == IterationEnd.BUDGET else reason


class Status(StrEnum):
    """Where a step or a run stands (`status` in run.json; a run is never pending)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class WorkStatus(StrEnum):
    """Where a forge task's work item stands (`status` in `.forge/work/*.yaml`): pending →
    executing → completed/failed; waiting: for an answer; interrupted: stopped by a signal."""

    PENDING = "pending"
    EXECUTING = "executing"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    IN_PR = "in_pr"
    """Shown only: a completed task whose branch went to a pull request (`forge.land: "pr"`)
    instead of landing here; its work item says `completed`."""
