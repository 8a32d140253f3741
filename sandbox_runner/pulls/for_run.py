"""A run's pull request from start to end: which settings apply to it and the target checked
before any agent runs (`run_target`), then its branch published once it landed
(`publish_run`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sandbox_runner.errors import ConfigError
from sandbox_runner.git.repo import branch_exists, current_branch
from sandbox_runner.git.runner import git
from sandbox_runner.plan.config import ChainsConfig, config_path, load_config
from sandbox_runner.plan.planned import Planned
from sandbox_runner.plan.pr import PrSettings, merge_pr
from sandbox_runner.pulls.body import SHOWN_COMMITS, reproduce, run_body, title_text
from sandbox_runner.pulls.publish import branch_commits, publish
from sandbox_runner.pulls.target import (
    PR_BRANCH_PREFIX,
    PrTarget,
    check_target,
    resolve_target,
)
from sandbox_runner.records.record import PullRecord, RunOptions, RunRecord
from sandbox_runner.records.store import project_root


def pr_settings(config: ChainsConfig | None, options: RunOptions) -> PrSettings | None:
    """The `pr` settings of a run (None: it opens no pull request): `--pr`, or `pr` in the
    config (top level, then the run's chain) with `enabled` left true."""
    chain = config.chains.get(options.chain) if config and options.chain else None
    merged = merge_pr(config.pr if config else None, chain.pr if chain else None)
    if options.pr:
        return merged or PrSettings()
    return merged if merged is not None and merged.enabled else None


def run_target(planned: Planned, *, dry_run: bool = False) -> PrTarget | None:
    """The checked target of a planned `--sandbox` run's pull request; its branch is made at
    the base's tip if it is not there yet (not by a dry run)."""
    options = planned.options
    settings = pr_settings(planned.config, options)
    if settings is None or not options.sandbox:  # `--pr` alone is refused as a usage error
        return None
    project = project_root(planned.cwd)
    run_base = options.base or current_branch(project)
    if run_base is None:
        raise ConfigError("pr: HEAD is detached; check out a branch or pass --base BRANCH")
    target = resolve_target(settings, project=project, run_base=run_base, label=_label(options))
    check_target(target)
    if not dry_run and not branch_exists(project, target.branch):
        git(project, "branch", "--no-track", target.branch, run_base)
    return target


def _label(options: RunOptions) -> str:
    return options.chain or options.dsl or "run"


def publish_run(
    target: PrTarget, *, project: Path, record: RunRecord, notice: Callable[[str], None]
) -> PullRecord:
    """Push the run's landed branch and open or update its pull request."""
    base = target.base if branch_exists(project, target.base) else record.base_commit
    commits, more = branch_commits(project, base or target.base, target.branch, SHOWN_COMMITS)
    body = run_body(record, commits, more, reproduce(record))
    title = title_text(f"fks: {record.label}")
    return publish(target, project=project, title=title, body=body, notice=notice)


def describe(pull: PullRecord) -> tuple[bool, str]:
    """One line saying what became of a pull request, and whether that is a failure."""
    if pull.error:
        return True, (
            f"Pull request not opened: {pull.error}; the branch {pull.head} stays "
            "(fks pr RUN tries again)"
        )
    if pull.note:
        return False, f"No pull request: {pull.note}"
    return False, f"Pull request #{pull.number} ({pull.state}): {pull.url}"


def recorded_target(record: RunRecord, project: Path) -> PrTarget:
    """The checked target of a recorded run's pull request (`fks pr RUN`): where it went, or
    where the run's settings say it goes."""
    options = record.options
    cwd = Path(record.cwd)
    config = load_config(
        config_path(cwd, Path(options.config) if options.config else None),
        cwd=cwd,
        required=False,
    )
    settings = pr_settings(config, options) or PrSettings()
    if record.pr is not None:
        settings = settings.model_copy(update={"branch": record.pr.head, "base": record.pr.base})
    elif record.base_branch and record.base_branch.startswith(PR_BRANCH_PREFIX + "/"):
        settings = settings.model_copy(update={"branch": record.base_branch})
    else:
        raise ConfigError(
            f"run {record.id} did not land on a pull request's branch; run it with --pr"
        )
    run_base = settings.base or options.base or current_branch(project)
    if run_base is None:
        raise ConfigError("pr: HEAD is detached; set pr.base")
    target = resolve_target(settings, project=project, run_base=run_base, label=_label(options))
    check_target(target)
    return target
