"""`fks pr RUN`: push a finished run's landed branch and open its pull request, or update the
open one (after a failure, or to refresh what it says)."""

from __future__ import annotations

from pathlib import Path

from sandbox_runner.commands.runs import load_run, open_store
from sandbox_runner.console.output import PREFIX
from sandbox_runner.errors import EXIT_COMPLETE, EXIT_INCOMPLETE, UsageError
from sandbox_runner.pulls.for_run import describe, publish_run, recorded_target
from sandbox_runner.records.record import run_alive


def pr(*, run_ref: str, cwd: Path | None) -> int:
    """0: the pull request is open (or nothing needed one), 1: it failed (one line says why)."""
    store = open_store(cwd)
    record = load_run(store, run_ref)
    if run_alive(record):
        raise UsageError(
            f"run {record.id} is still running; it opens its pull request when it ends"
        )
    target = recorded_target(record, store.project)

    def notice(text: str) -> None:
        print(f"{PREFIX} {text}", flush=True)

    pull = publish_run(target, project=store.project, record=record, notice=notice)
    store.open(record).set_pr(pull)
    failed, line = describe(pull)
    notice(line)
    return EXIT_INCOMPLETE if failed else EXIT_COMPLETE
