"""A step's work brought home: after each iteration (its commits synced, its requests through
the egress proxy taken), when it is stopped (what it committed salvaged), and at its end (what it
left uncommitted committed, then a complete step merged into its base through
`sandbox_runner.git`), each said in one `[fks]` line."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from sandbox_runner.backends.api import (
    BranchBinding,
    IterationSoFar,
    IterationTraffic,
    Landed,
    Notices,
    Phase,
    PreparedStep,
    StepSoFar,
)
from sandbox_runner.backends.docker.egress.audit import merged
from sandbox_runner.backends.docker.egress.proxy import SETTLE_S, EgressProxy
from sandbox_runner.backends.docker.egress.refusals import Denied, Refusals, refused_warning
from sandbox_runner.backends.docker.settings import CLI_HOME
from sandbox_runner.backends.docker.workspace.sandbox import Synced, WorkspaceSandbox
from sandbox_runner.errors import FksError, WorkspaceError
from sandbox_runner.git.bundles import apply_leftover
from sandbox_runner.git.landing import Landing, merge_back
from sandbox_runner.git.repo import (
    Repo,
    branch_exists,
    create_branch,
    delete_branch,
    identity_env,
    rev,
)
from sandbox_runner.git.runner import git_ok
from sandbox_runner.outcomes import IterationEnd, StepEnd
from sandbox_runner.plan.agents import AgentCommand
from sandbox_runner.plan.dsl import Step
from sandbox_runner.results.ended import IterationResult, StepOutcome
from sandbox_runner.results.reported import DeniedRecord, NetworkRecord
from sandbox_runner.signals import deferred_signals

DENIED_REPORTED = 10  # refused destinations named when a step ends; the rest summed in one line


@dataclass
class StepLanding:
    """Step `index` of run `run_id`: its branch, its sandbox, the environment of its
    containers, its proxy. It reads the step's record (`record`, the caller's) and returns what
    became of the step's work; the caller writes it down."""

    run_id: str
    reporter: Notices
    base: str
    index: int
    step: Step
    record: StepSoFar
    binding: BranchBinding
    sandbox: WorkspaceSandbox
    env: dict[str, str]
    proxy: EgressProxy | None
    secret_files: Sequence[str] = ()
    """Files (relative to the repository) secrets and CA certificates are read from: a landing
    that changes one is refused."""

    def prepared(self, agent: AgentCommand, timeout: float) -> PreparedStep:
        """The step as the loop runs it: `agent` in its sandbox, its work landed here."""
        return PreparedStep(
            agent=agent,
            sandbox=self.sandbox,
            env=self.env,
            timeout=timeout,
            after_iteration=self.after_iteration,
            land=self.land,
            binding=self.binding,
            head=self.head,
            cli_home=Path(CLI_HOME),
        )

    def head(self) -> str | None:
        """The tip of the step's branch (None: it is gone)."""
        return _safe_rev(self.sandbox.workspace.repo, self.binding.branch)

    def salvage(self, *, interrupted: bool) -> None:
        """Import the commits a workspace holds that its branch has not got yet: those of the
        iteration just stopped (`interrupted`), or those a killed run had not saved."""
        sandbox, reporter, branch = self.sandbox, self.reporter, self.binding.branch
        repo = sandbox.workspace.repo
        whose = "the stopped iteration" if interrupted else "the killed run"
        before = _safe_rev(repo, branch)
        try:
            sandbox.export_now(self.env)
            synced = sandbox.sync(self.env)
        except FksError as exc:
            synced = Synced(error=str(exc))
        if synced.error:
            reporter.warn(f"could not save the commits of {whose}: {synced.error}")
        if self.head() != before:
            saved = "Saved the commits of" if interrupted else "Kept the commits"
            reporter.info(
                f"{saved} {whose}{'' if interrupted else ' had not saved yet'} on {branch}"
            )
        if interrupted and _safe_rev(repo, sandbox.leftover) is not None:
            reporter.info(
                "The files it left uncommitted stay in its workspace: fks run --resume goes on "
                f"with them, fks clean commits them to {branch}"
            )

    def open(self, *, resumed: bool) -> None:
        """The step's workspace, made if it is not there; what a killed run left in it first
        saved onto the step's branch."""
        began, workspace = time.monotonic(), self.sandbox.workspace
        if resumed and workspace.exists():
            self.salvage(interrupted=False)
        workspace.ensure()
        self.sandbox.timed("workspace", began, f"Docker volume {workspace.name}")

    @contextmanager
    def kept_when_stopped(self, kept: set[str] | None, *, resumed: bool) -> Iterator[None]:
        """A step interrupted or failed mid-step keeps what its agent committed so far, and its
        workspace as it is (added to `kept`, for --resume; None: not kept); one that failed
        before its first iteration keeps nothing."""
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, Exception) and not resumed and not self.record.iterations:
                raise
            if kept is not None:
                kept.add(self.sandbox.workspace.name)
            with deferred_signals():
                self.salvage(interrupted=True)
            raise

    def after_iteration(self, result: IterationResult) -> IterationResult:
        synced = self.sandbox.sync(self.env)
        if self.proxy is not None:  # what arrives later is the next iteration's (or see land)
            taken = self.proxy.take_traffic()
            result = replace(
                result,
                denied=_denied_records(taken.refusals),
                denied_more=taken.refusals.more,
                network=taken.network,
            )
        for warning in synced.warnings:
            self.reporter.warn(warning)
        if synced.error is not None:
            note = f"Iteration {result.number}: {synced.error}; '{self.base}' was not touched"
            return replace(
                result,
                complete=False,
                marker=False,
                reason=IterationEnd.EXPORT_FAILED,
                note=note,
                changed=None,
            )
        return replace(result, changed=synced.changed)

    def land(self, outcome: StepOutcome) -> Landed:
        """Once the loop ended: commit what was left uncommitted, then merge a complete step."""
        step, index, binding = self.step, self.index, self.binding
        repo, branch, base = self.sandbox.workspace.repo, binding.branch, binding.base
        identity = identity_env(repo)
        message = (
            f"fks: commit what {step.agent} left uncommitted (run {self.run_id}, step {index})"
        )
        iterations = self.record.iterations
        late = None
        if self.proxy is not None and iterations:
            late = _late_traffic(iterations[-1], self.proxy)
        self._report_denied(late)
        began = time.monotonic()  # the merge: what was left uncommitted, then the branch
        leftover = apply_leftover(repo, branch, self.sandbox.leftover, message, identity)
        if leftover:
            self.reporter.info(f"Committed work {step.agent} left uncommitted ({leftover[:12]})")
        head = rev(repo, branch)
        if not outcome.complete:
            return Landed(outcome, head=head, late=late)
        landing = merge_back(
            repo,
            base,
            branch,
            f"fks: merge step {index} ({step.agent}) of run {self.run_id}",
            identity,
            kept=self.secret_files,
        )
        self.reporter.phase(Phase("merge", time.monotonic() - began))
        outcome = self._report_landing(landing, branch, base, outcome)
        return Landed(outcome, head=head, landing=landing, late=late)

    def _report_denied(self, late: IterationTraffic | None) -> None:
        """One line per refused destination, with the option that would allow it: the
        DENIED_REPORTED most refused, then one line for the rest. `late`: the last iteration's
        requests, those logged after it ended included."""
        counts, more = _denied_counts(self.record.iterations, late)
        ordered = sorted(counts.items(), key=lambda item: -item[1])
        for (host, port), count in ordered[:DENIED_REPORTED]:
            self.reporter.warn(refused_warning(host, port, count))
        more += sum(count for _, count in ordered[DENIED_REPORTED:])
        if more:
            self.reporter.warn(
                f"{more} more request{'s were' if more != 1 else ' was'} denied, to other "
                f"destinations (the most refused of each iteration: fks show {self.run_id})"
            )

    def _report_landing(
        self, landing: Landing, branch: str, base: str, outcome: StepOutcome
    ) -> StepOutcome:
        reporter = self.reporter
        if landing.conflicts:
            reporter.info(
                f"Not merged: {branch} conflicts with '{base}' in "
                f"{', '.join(landing.conflicts)}; '{base}' left untouched"
            )
            return replace(outcome, complete=False, reason=StepEnd.MERGE_CONFLICT)
        if landing.blocked:
            reporter.info(
                f"Not merged: could not update '{base}' with {branch}: {landing.blocked}, then "
                f"continue with: fks run --resume {self.run_id} (or: git merge {branch})"
            )
            return replace(outcome, complete=False, reason=StepEnd.MERGE_BLOCKED)
        if landing.nothing_new:
            reporter.info(f"Nothing new on {branch} to merge into '{base}'")
        elif landing.commit:
            how = "fast-forward" if landing.fast_forward else "merge commit"
            reporter.info(f"Merged {branch} into '{base}' ({how}, now {landing.commit[:12]})")
        return outcome


def _denied_records(refusals: Refusals) -> tuple[DeniedRecord, ...]:
    return tuple(DeniedRecord(host=d.host, port=d.port, count=d.count) for d in refusals.listed)


def _late_traffic(last: IterationSoFar, proxy: EgressProxy) -> IterationTraffic | None:
    """The last iteration's requests with those whose log lines arrived after its take (its
    own), taken once SETTLE_S has passed since it ended (a wait per step, not per iteration);
    None when none arrived."""
    ended = last.ended.timestamp() if last.ended is not None else None
    taken = proxy.take_traffic(settled_at=None if ended is None else ended + SETTLE_S)
    if not taken.network.total:
        return None
    kept = Refusals(tuple(Denied(d.host, d.port, d.count) for d in last.denied), last.denied_more)
    both = kept.plus(taken.refusals)
    network = merged(last.network or NetworkRecord(), taken.network)
    return IterationTraffic(_denied_records(both), both.more, network)


def _denied_counts(
    iterations: Sequence[IterationSoFar], late: IterationTraffic | None
) -> tuple[Counter[tuple[str, int | None]], int]:
    """Refused requests per destination over the step's iterations, and those not listed; the
    last iteration's as `late` says, when it says."""
    counted: list[tuple[Sequence[DeniedRecord], int]] = [
        (it.denied, it.denied_more) for it in iterations
    ]
    if late is not None and counted:
        counted[-1] = (late.denied, late.denied_more)
    counts: Counter[tuple[str, int | None]] = Counter()
    more = 0
    for denied, denied_more in counted:
        more += denied_more
        for d in denied:
            counts[(d.host, d.port)] += d.count
    return counts, more


def review_lines(
    record: StepSoFar, top: Path, base: str, run_id: str | None, kept: Collection[str]
) -> list[str]:
    """How to look at a step's branch that did not land (none for one that did), and its
    workspace when it is one of the `kept` volumes."""
    if not record.branch or record.merged:
        return []
    repo = Path(record.repo or top)
    base = record.base_branch or base
    if _no_commits(repo, record.branch, record.start_commit):
        lines = [f"No commits on {record.branch}: the step made none, nothing to review"]
    else:
        lines = [f"Branch kept for review: {record.branch}"]
        if record.conflicts:
            lines.append(f"It conflicts with '{base}' in: {', '.join(record.conflicts)}")
        lines.append(f"  git -C {repo} log --stat {base}..{record.branch}")
        if run_id is not None:
            lines.append(f"  fks review {run_id}")
    if record.workspace and record.workspace in kept:
        lines.append(
            f"Workspace kept for --resume: Docker volume {record.workspace} (fks clean commits "
            "what is uncommitted in it to the branch, then removes it)"
        )
    return lines


def _no_commits(repo: Path, branch: str, start: str | None) -> bool:
    """The step's branch is still where it started (its base's tip then)."""
    tip = ["merge-base", "--is-ancestor", f"refs/heads/{branch}", start] if start else []
    return bool(tip) and branch_exists(repo, branch) and git_ok(repo, *tip)


def start_branch(
    record: StepSoFar, repo: Repo, base: str, branch: str, workspace: str, *, resumed: bool
) -> BranchBinding:
    """Create the step branch at the base's tip (a resumed step keeps its own); where the
    step's work goes, for its record."""
    start_commit = None if resumed else rev(repo, base)
    if start_commit is not None:
        create_branch(repo, branch, start_commit)
    elif record.start_commit and not branch_exists(repo.top, branch):
        # `fks clean --branches` removed it because it held no commit: start it again.
        create_branch(repo, branch, record.start_commit)
    return BranchBinding(str(repo.top), base, branch, workspace, start_commit)


@contextmanager
def dropped_on_early_failure(
    repo: Repo, branch: str, record: StepSoFar, *, resumed: bool
) -> Iterator[None]:
    """A new step's branch is deleted again if the step fails before its first iteration
    (preparing its workspace, its proxy, or starting its agent): nothing is left of it."""
    try:
        yield
    except Exception:
        if not resumed and not record.iterations:
            delete_branch(repo, branch)
        raise


def _safe_rev(repo: Repo, ref: str) -> str | None:
    try:
        return rev(repo, ref)
    except WorkspaceError:
        return None
