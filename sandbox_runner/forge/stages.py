"""The stages of one task, for real: each stage is one agent run (Claude, or the agent of any
CLI `forge.agents` names for it; a one-iteration step of the task's run record) on the task's branch `fks/forge/<task-id>`, in a git worktree of its own or,
with `--sandbox`, in containers on a workspace of its own (whose commits come home as checked
bundles, like every sandboxed step's)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sandbox_runner import nofollow
from sandbox_runner.agentclis.registry import agent_cli
from sandbox_runner.backends.api import Sandbox
from sandbox_runner.errors import FksError
from sandbox_runner.forge import prompts
from sandbox_runner.forge.agents import stage_agents, tools
from sandbox_runner.forge.models import (
    AnalysisResult,
    ArchitectResult,
    ReviewResult,
    StructuredAnswer,
    json_schema,
    parse_answer,
)
from sandbox_runner.forge.pipeline import Answered, Implemented, Integrated
from sandbox_runner.forge.pulls import open_task_pr
from sandbox_runner.forge.work import WorkItem
from sandbox_runner.forge.worktrees import task_worktree
from sandbox_runner.git.landing import merge_back
from sandbox_runner.git.repo import (
    Repo,
    branch_exists,
    create_branch,
    delete_branch,
    exclude_forge_dir,
    identity_env,
    rev,
)
from sandbox_runner.git.runner import git, git_head
from sandbox_runner.notify.send import Notifier
from sandbox_runner.plan.agents import CLAUDE
from sandbox_runner.plan.config import AgentConfig
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.forge_settings import ForgeSettings
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.pulls.target import PrTarget
from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.records.lock import waiting_lock
from sandbox_runner.records.record import RunOptions, StepRecord
from sandbox_runner.records.store import ActiveRun
from sandbox_runner.results.ended import StepOutcome
from sandbox_runner.runs.lifecycle import BackendSpec, TaskRun, task_run
from sandbox_runner.steps.guards import Budget
from sandbox_runner.steps.reporter import Reporter
from sandbox_runner.steps.runner import StepSettings
from sandbox_runner.steps.tap import LogLimits

A = TypeVar("A", bound=StructuredAnswer)
TASK_BRANCH_PREFIX = "fks/forge"


def task_branch(task_id: str) -> str:
    return f"{TASK_BRANCH_PREFIX}/{task_id}"


@dataclass
class ForgeContext:
    """What the stages of every task share."""

    repo: Repo
    base: str
    settings: ForgeSettings
    reporter: Reporter
    session: str
    sandbox: SandboxSettings | None = None
    """None: stages run as local processes in a worktree."""
    local_sandbox: Sandbox | None = None
    """Where local stages run (tests pass a fake)."""
    secrets: Sequence[str] = ()
    max_cost: float | None = None
    max_task_cost: float | None = None
    stall_after: float | None = None
    """Seconds without output before a stage's agent is stopped as stalled (None: never)."""
    merge_lock: Path | None = None
    log_limits: LogLimits = field(default_factory=LogLimits)
    secret_files: Sequence[str] = ()
    """Files (relative to the repository) secrets and CA certificates are read from: a task
    that changes one does not land."""
    notifier: Notifier = field(default_factory=Notifier)
    """Where questions and review verdicts are told (`notify`)."""
    pr: PrTarget | None = None
    """`forge.land: "pr"`: where each task's branch goes as a pull request (its `branch` is
    the task's)."""
    agents: Mapping[str, AgentConfig] = field(default_factory=dict)
    """The config's agents: those `forge.agents` names run their stages."""

    @property
    def project(self) -> Path:
        return self.repo.top


@dataclass
class TaskStages:
    """Runs one task's stages; a context manager that holds its run record and workspace."""

    ctx: ForgeContext
    item: WorkItem
    task: prompts.TaskText
    budget: Callable[[], Budget | None] | None = None
    """What the next stage may spend (passed to Claude; its stream is checked against it)."""
    _stack: ExitStack = field(default_factory=ExitStack)
    _task: TaskRun | None = None
    _worktree: Path | None = None
    _unfit: dict[str, str] = field(default_factory=dict)
    """Why a stage's last JSON-block answer did not fit, for the prompt that asks again."""

    def __enter__(self) -> TaskStages:
        exclude_forge_dir(self.ctx.project)  # .forge/ (task.yaml in worktrees) is never committed
        self._start_branch()
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)  # the run record sees how the task left

    @property
    def task_run(self) -> TaskRun:
        """The run of this process's stages, and the backend they run on: made by the first
        stage (landing an approved branch alone runs no agent, and makes no record)."""
        if self._task is None:
            with ExitStack() as stack:
                if self.ctx.sandbox is None:  # local stages run in a worktree of the task's branch
                    self._worktree = stack.enter_context(task_worktree(self.ctx.repo, self.item))
                self._task = stack.enter_context(
                    task_run(
                        self._backend_spec(),
                        project=self.ctx.project,
                        options=_run_options(self.ctx, self.item),
                        base=(self.item.branch, self.item.start_commit),
                        reporter=self.ctx.reporter,
                        task=self,
                    )
                )
                self._stack.enter_context(stack.pop_all())
        return self._task

    @property
    def active_run(self) -> ActiveRun | None:
        """The record of this process's stages, once the first one started."""
        return self._task.run if self._task is not None else None

    # --- what the task's run tells it (`runs.lifecycle.TaskSide`) ----------------------------

    def recorded(self, run_id: str) -> None:
        self.item.runs = sorted({*self.item.runs, run_id})

    def discarded(self, run_id: str) -> None:
        self.item.runs.remove(run_id)

    def outcome(self) -> tuple[bool, str | None]:
        return self.item.stage == "done", self.item.error

    # --- the task's branch and where its stages run -----------------------------------------

    def _start_branch(self) -> None:
        """A new work item starts its branch afresh at the base's tip; a resumed one keeps it."""
        repo, item = self.ctx.repo, self.item
        branch = task_branch(item.task_id)
        if item.start_commit is None:
            tip = rev(repo, self.ctx.base)
            git(repo.top, "update-ref", f"refs/heads/{branch}", tip)
            item.branch, item.base, item.start_commit = branch, self.ctx.base, tip
        elif not branch_exists(repo.top, branch):
            create_branch(repo, branch, item.start_commit)
        item.branch = branch

    def _backend_spec(self) -> BackendSpec:
        return BackendSpec(
            cwd=self._worktree or self.ctx.project,
            agents=self._stage_agents(),
            sandbox=self.ctx.sandbox,
            base=self.item.branch,
            keep_interrupted=False,
            local_sandbox=self.ctx.local_sandbox,
        )

    @property
    def _complexity(self) -> str | None:
        return self.item.analysis.complexity if self.item.analysis is not None else None

    # --- one stage ----------------------------------------------------------------------------

    def _stage_agents(self) -> dict[str, AgentConfig]:
        return stage_agents(self.ctx.settings, self.ctx.agents, self.ctx.project)

    def _agent(self, stage: str) -> str:
        if stage == "implement" and self._complexity == "high":
            return "forge:implement-complex"
        return f"forge:{stage}"

    def _stage(
        self,
        stage: str,
        prompt: str,
        schema: str | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[StepRecord, StepOutcome]:
        """Run the stage's agent once (asked for an answer that fits `schema`, if given); its
        commits land on the task's branch."""
        task = self.task_run
        agent = self._agent(stage)
        config = self._stage_agents()[agent]
        record, outcome = task.stage(
            Step(agent=agent, args=tuple(tools(self.ctx.settings, stage, config))),
            PromptSource(origin="forge", text=prompt),
            StepSettings(
                env=env or {},
                secrets=self.ctx.secrets,
                no_progress_limit=0,
                budget=self.budget,
                stall_after=self.ctx.stall_after,
                log_limits=self.ctx.log_limits,
                schema=schema,
            ),
        )
        if record.branch and record.merged and record.start_commit == record.head_commit:
            delete_branch(self.ctx.repo, record.branch)  # a read-only stage: nothing to review
        self.item.runs = sorted({*self.item.runs, task.run.record.id})
        return record, outcome

    def _ask(
        self, stage: str, model: type[A], prompt: str, env: dict[str, str] | None = None
    ) -> Answered[A]:
        """The stage's answer: asked of the CLI with the schema where it has a way (Claude,
        Codex), else as the JSON block the prompt asks for, saying why the last one did not fit
        when the pipeline asks once more."""
        schema = json_schema(model)
        cli = agent_cli(self._stage_agents()[self._agent(stage)].cli or CLAUDE)
        block = cli.structured(schema, Path("~")) is None
        if block:
            prompt = prompts.json_block(prompt, schema, wrong=self._unfit.pop(stage, None))
        answered = self._answer(model, *self._stage(stage, prompt, schema, env))
        if block and answered.answer is None and answered.problem:
            self._unfit[stage] = answered.problem
        return answered

    def _answer(self, model: type[A], record: StepRecord, outcome: StepOutcome) -> Answered[A]:
        last = outcome.last
        cost = record.cost_usd
        if not outcome.complete or last is None:
            return Answered(None, cost, _run_problem(outcome))
        raw = last.claude.structured_output if last.claude is not None else None
        if raw is None and last.note:  # the CLI reported an error: say that
            return Answered(None, cost, last.note)
        answer = parse_answer(model, raw)
        if isinstance(answer, str):
            return Answered(None, cost, answer)
        return Answered(answer, cost)

    # --- Stages -----------------------------------------------------------------------------

    def analyze(self, item: WorkItem) -> Answered[AnalysisResult]:
        return self._ask("analyze", AnalysisResult, prompts.analyze_prompt(self.task))

    def architect(self, item: WorkItem) -> Answered[ArchitectResult]:
        return self._ask("architect", ArchitectResult, prompts.architect_prompt(self.task, item))

    def implement(self, item: WorkItem) -> Implemented:
        assert item.branch is not None
        before = rev(self.ctx.repo, item.branch)
        assert self.task_run  # the session (and its worktree, for the files below) exists from here
        files = {"task.yaml": prompts.task_yaml(self.task, item)}
        if item.review is not None:
            files["review.yaml"] = prompts.review_yaml(item.review)
        self._write_forge_files(files)
        env = {"FKS_TASK_YAML": files["task.yaml"], "FKS_REVIEW_YAML": files.get("review.yaml", "")}
        record, outcome = self._stage(
            "implement", prompts.implement_prompt(self.task, item), env=env
        )
        after = rev(self.ctx.repo, item.branch)
        commits = 0 if after == before else _count(self.ctx.repo, before, after)
        last = outcome.last
        failed = not outcome.complete or (last is not None and bool(last.exit_code or last.note))
        problem = _run_problem(outcome) if failed and not commits else None
        return Implemented(commits=commits, cost_usd=record.cost_usd, problem=problem)

    def review(self, item: WorkItem) -> Answered[ReviewResult]:
        assert item.branch is not None and item.start_commit is not None
        raw, more = git_head(
            self.ctx.project,
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            item.start_commit,
            item.branch,
            limit=prompts.MAX_DIFF,
        )
        diff, cut = prompts.review_diff(raw, more)
        self._write_forge_files({"review.diff": diff})
        prompt = prompts.review_prompt(self.task, item, item.start_commit, cut)
        return self._ask("review", ReviewResult, prompt, {"FKS_REVIEW_DIFF": diff})

    def _write_forge_files(self, files: dict[str, str]) -> None:
        """`.forge/<name>` in a local stage's worktree (a sandboxed stage's container writes
        them from its environment); a `.forge` that is not a folder is refused, not followed."""
        if self._worktree is None:
            return
        try:
            with nofollow.opened_dir(self._worktree, Path(".forge"), create=True) as fd:
                for name in ("task.yaml", "review.yaml", "review.diff"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)  # nothing stale: only this stage's files
                for name, text in files.items():
                    nofollow.write_file(fd, name, text.encode("utf-8"))
        except nofollow.LinkRefused as exc:
            raise FksError(
                f"{exc} in the task's worktree (its branch {self.item.branch} made it so); "
                "fks does not write through it - remove it from the branch"
            ) from None

    def integrate(self, item: WorkItem) -> Integrated:
        assert item.branch is not None
        if (pr := self.ctx.pr) is not None:
            return open_task_pr(pr, self.ctx.project, self.task, item, self.ctx.reporter.info)
        with _merge_queue(self.ctx):
            landing = merge_back(
                self.ctx.repo,
                self.ctx.base,
                item.branch,
                f"fks forge: {item.task_id} {item.title}"[:200],
                identity_env(self.ctx.repo),
                kept=self.ctx.secret_files,
            )
        return Integrated(
            merged=landing.merged,
            commit=landing.commit,
            conflicts=tuple(landing.conflicts),
            blocked=landing.blocked,
        )

    def restart_on_base(self, item: WorkItem) -> str:
        assert item.branch is not None
        previous = rev(self.ctx.repo, item.branch)
        tip = rev(self.ctx.repo, self.ctx.base)
        if self._worktree is not None:
            git(self._worktree, "reset", "-q", "--hard", tip)
        else:
            git(self.ctx.project, "update-ref", f"refs/heads/{item.branch}", tip, previous)
        item.start_commit = tip
        return previous


def _run_problem(outcome: StepOutcome) -> str:
    last = outcome.last
    if last is not None and last.note:
        return last.note
    if last is not None and last.exit_code:
        tail = (last.error_tail or "").strip().splitlines()[-1:]
        return f"the agent exited {last.exit_code}" + (f": {tail[0][:200]}" if tail else "")
    return f"the agent run did not finish ({outcome.reason})"


def _count(repo: Repo, before: str, after: str) -> int:
    return int(git(repo.top, "rev-list", "--count", f"{before}..{after}").strip() or 0)


def _run_options(ctx: ForgeContext, item: WorkItem) -> RunOptions:
    """What the run record of `item`'s stages says of how it was started (`fks show`, `logs`,
    `review`)."""
    return RunOptions(
        forge_task=item.task_id,
        forge_session=ctx.session,
        sandbox=ctx.sandbox is not None,
        base=ctx.base,
        max_cost=ctx.max_cost,
    )


def _merge_queue(ctx: ForgeContext) -> AbstractContextManager[None]:
    """One landing at a time on the base, across every worker (first come, first landed)."""
    return waiting_lock(ctx.merge_lock or ForgeLayout(ctx.project).lock("forge-merge"))
