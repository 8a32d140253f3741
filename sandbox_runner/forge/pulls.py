"""`forge.land: "pr"`: an approved task's branch pushed and opened as a pull request of its own
(title from the task, body with its acceptance criteria and the review's verdict) instead of
merged here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from sandbox_runner.forge.pipeline import Integrated
from sandbox_runner.forge.prompts import TaskText
from sandbox_runner.forge.work import WorkItem
from sandbox_runner.pulls.body import SHOWN_COMMITS, TaskSummary, task_body, title_text
from sandbox_runner.pulls.publish import branch_commits, publish
from sandbox_runner.pulls.target import PrTarget


def open_task_pr(
    pr: PrTarget, project: Path, task: TaskText, item: WorkItem, notice: Callable[[str], None]
) -> Integrated:
    """Push the task's branch and open (or update) its pull request; a failure blocks the
    landing in one line (`fks forge land TASK` tries again)."""
    assert item.branch is not None
    target = replace(pr, branch=item.branch)
    review = item.review
    summary = TaskSummary(
        task_id=item.task_id,
        title=task.title,
        criteria=task.criteria,
        approved=bool(review and review.approved),
        issues=review.issues if review else (),
        suggestions=review.suggestions if review else (),
        cost_usd=item.cost_usd,
        runs=item.runs,
    )
    commits, more = branch_commits(
        project, item.start_commit or target.base, item.branch, SHOWN_COMMITS
    )
    pull = publish(
        target,
        project=project,
        title=title_text(f"{item.task_id}: {task.title}"),
        body=task_body(summary, commits, more),
        notice=notice,
    )
    item.pr = pull
    if pull.error is not None:
        return Integrated(merged=False, blocked=f"pull request not opened: {pull.error}")
    if pull.url is None:
        return Integrated(merged=False, blocked=pull.note or "no pull request opened")
    return Integrated(merged=False, in_pr=True)
