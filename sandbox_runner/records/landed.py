"""What "landed" means, once for every view: `fks runs` (and `--json`), `fks ui`'s runs page
and `fks forge`'s summaries.

A run has landed when all of its work is on its base branch:
- a chain run (`fks run`) once it is complete. A sandboxed run's steps were each merged into
  the base as they completed (a step with nothing new to merge counts); a local run's agents
  committed on the checked-out branch itself, so there was nothing to merge.
- a forge task's run when it is its task's last run and the task's work was merged into the
  base (the task is completed). Its stages' merges into the task's own branch do not count.
An incomplete, failed, interrupted or running run has not landed, even when some of its steps
were merged: `fks review` shows which.
"""

from __future__ import annotations

from collections.abc import Collection

from sandbox_runner.outcomes import Status
from sandbox_runner.records.record import RunRecord


def landed(record: RunRecord, landed_tasks: Collection[str]) -> bool:
    """Whether all of `record`'s work is on its base; `landed_tasks`: the last run of every
    forge task whose work was merged into its base."""
    if record.options.forge_task:
        return record.id in landed_tasks
    return record.status == Status.COMPLETE
