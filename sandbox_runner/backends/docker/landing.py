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
from typing import TYPE_CHECKING

from sandbox_runner.backends.api import Phase
from sandbox_runner.backends.docker.egress.audit import merged
from sandbox_runner.backends.docker.egress.proxy import SETTLE_S, EgressProxy
from sandbox_runner.backends.docker.egress.refusals import Denied, Refusals
from sandbox_runner.backends.docker.workspace.sandbox import Synced, WorkspaceSandbox
from sandbox_runner.errors import FksError, WorkspaceError
from sandbox_runner.git.bundles import apply_leftover
from sandbox_runner.git.landing import Landing, merge_back
from sandbox_runner.git.repo import Repo, delete_branch, identity_env, rev
from sandbox_runner.outcomes import IterationEnd, StepEnd
from sandbox_runner.records.reported import DeniedRecord, NetworkRecord

if TYPE_CHECKING:
    from sandbox_runner.backends.api import Notices
    from sandbox_runner.plan.dsl import Step
    from sandbox_runner.records.record import IterationRecord, StepRecord
    from sandbox_runner.records.results import IterationResult, StepOutcome
    from sandbox_runner.records.store import ActiveRun

DENIED_REPORTED = 10  # refused destinations named when a step ends; the rest summed in one line


@dataclass
class StepLanding:
    """One step of run `run`: its sandbox, the environment of its containers, its proxy."""

    run: ActiveRun
    reporter: Notices
    base: str
    index: int
    step: Step
    record: StepRecord
    sandbox: WorkspaceSandbox
    env: dict[str, str]
    proxy: EgressProxy | None
    secret_files: Sequence[str] = ()
    """Files (relative to the repository) secrets and CA certificates are read from: a landing
    that changes one is refused."""

    def salvage(self, *, interrupted: bool) -> None:
        """Import the commits a workspace holds that its branch has not got yet: those of the
        iteration just stopped (`interrupted`), or those a killed run had not saved."""
        record, sandbox, reporter = self.record, self.sandbox, self.reporter
        assert record.branch is not None
        repo = sandbox.workspace.repo
        whose = "the stopped iteration" if interrupted else "the killed run"
        before = _safe_rev(repo, record.branch)
        try:
            sandbox.export_now(self.env)
            synced = sandbox.sync(self.env)
        except FksError as exc:
            synced = Synced(error=str(exc))
        if synced.error:
            reporter.warn(f"could not save the commits of {whose}: {synced.error}")
        self.run.set_head(record, _safe_rev(repo, record.branch))
        if record.head_commit != before:
            saved = "Saved the commits of" if interrupted else "Kept the commits"
            reporter.info(
                f"{saved} {whose}{'' if interrupted else ' had not saved yet'} on {record.branch}"
            )
        if interrupted and _safe_rev(repo, sandbox.leftover) is not None:
            reporter.info(
                "The files it left uncommitted stay in its workspace: fks run --resume goes on "
                f"with them, fks clean commits them to {record.branch}"
            )

    def after_iteration(self, result: IterationResult) -> IterationResult:
        synced = self.sandbox.sync(self.env)
        if self.proxy is not None:  # what arrives later is the next iteration's (or see land)
            taken = self.proxy.take_traffic()
            result = replace(
                result,
                denied=tuple(
                    DeniedRecord(host=d.host, port=d.port, count=d.count)
                    for d in taken.refusals.listed
                ),
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

    def land(self, outcome: StepOutcome) -> StepOutcome:
        """Once the loop ended: commit what was left uncommitted, then merge a complete step."""
        record, step, index = self.record, self.step, self.index
        assert record.branch is not None and record.base_branch is not None
        repo, branch, base, run_id = (
            self.sandbox.workspace.repo,
            record.branch,
            record.base_branch,
            self.run.record.id,
        )
        identity = identity_env(repo)
        message = f"fks: commit what {step.agent} left uncommitted (run {run_id}, step {index})"
        if self.proxy is not None and record.iterations:
            self._late_refusals(record.iterations[-1], self.proxy)
        self._report_denied()
        began = time.monotonic()  # the merge: what was left uncommitted, then the branch
        leftover = apply_leftover(repo, branch, self.sandbox.leftover, message, identity)
        if leftover:
            self.reporter.info(f"Committed work {step.agent} left uncommitted ({leftover[:12]})")
        self.run.set_head(record, rev(repo, branch))
        if not outcome.complete:
            return outcome
        landing = merge_back(
            repo,
            base,
            branch,
            f"fks: merge step {index} ({step.agent}) of run {run_id}",
            identity,
            kept=self.secret_files,
        )
        self.reporter.phase(Phase("merge", time.monotonic() - began))
        self.run.record_landing(record, landing)
        return self._report_landing(landing, branch, base, outcome)

    def _late_refusals(self, last: IterationRecord, proxy: EgressProxy) -> None:
        """Requests (and refusals) whose log lines arrived after the last iteration's take: its
        own. Taken once SETTLE_S has passed since it ended (a wait per step, not per
        iteration)."""
        ended = last.ended.timestamp() if last.ended is not None else None
        taken = proxy.take_traffic(settled_at=None if ended is None else ended + SETTLE_S)
        late = taken.refusals
        if not taken.network.total:
            return
        kept = Refusals(
            tuple(Denied(d.host, d.port, d.count) for d in last.denied), last.denied_more
        )
        both = kept.plus(late)
        self.run.set_denied(
            last,
            [DeniedRecord(host=d.host, port=d.port, count=d.count) for d in both.listed],
            both.more,
            merged(last.network or NetworkRecord(), taken.network),
        )

    def _report_denied(self) -> None:
        """One line per refused destination, with the option that would allow it: the
        DENIED_REPORTED most refused, then one line for the rest."""
        counts: Counter[tuple[str, int | None]] = Counter()
        more = 0
        for it in self.record.iterations:
            more += it.denied_more
            for d in it.denied:
                counts[(d.host, d.port)] += d.count
        ordered = sorted(counts.items(), key=lambda item: -item[1])
        for (host, port), count in ordered[:DENIED_REPORTED]:
            entry = host if port in (None, 80, 443) else f"{host}:{port}"
            line = DeniedRecord(host=host, port=port, count=count).describe()
            verb = "was" if count == 1 else "were"
            self.reporter.warn(f"{line} {verb} denied; allow with --allow {entry}")
        more += sum(count for _, count in ordered[DENIED_REPORTED:])
        if more:
            self.reporter.warn(
                f"{more} more request{'s were' if more != 1 else ' was'} denied, to other "
                f"destinations (the most refused of each iteration: fks show {self.run.record.id})"
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
                f"continue with: fks run --resume {self.run.record.id} (or: git merge {branch})"
            )
            return replace(outcome, complete=False, reason=StepEnd.MERGE_BLOCKED)
        if landing.nothing_new:
            reporter.info(f"Nothing new on {branch} to merge into '{base}'")
        elif landing.commit:
            how = "fast-forward" if landing.fast_forward else "merge commit"
            reporter.info(f"Merged {branch} into '{base}' ({how}, now {landing.commit[:12]})")
        return outcome


def review_lines(
    record: StepRecord, top: Path, base: str, run_id: str | None, kept: Collection[str]
) -> list[str]:
    """How to look at a step's branch that did not land (none for one that did), and its
    workspace when it is one of the `kept` volumes."""
    if not record.branch or record.merged:
        return []
    repo = Path(record.repo or top)
    base = record.base_branch or base
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


@contextmanager
def dropped_on_early_failure(
    repo: Repo, branch: str, record: StepRecord, *, resumed: bool
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
