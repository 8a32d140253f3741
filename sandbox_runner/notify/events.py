"""The events fks notifies of, each one call: a run's end, a forge question, a review verdict,
a pull request. Each sends to the targets that take it and keeps the deliveries in the run's
record; none raises or waits longer than the notifier's timeout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox_runner.notify import messages
from sandbox_runner.notify.pages import page
from sandbox_runner.notify.send import Notifier
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.plan.config import ChainsConfig
from sandbox_runner.plan.notify import resolve_targets
from sandbox_runner.plan.sandbox import SandboxSettings
from sandbox_runner.records.record import DeliveryRecord
from sandbox_runner.records.store import ActiveRun

Say = Callable[[str], None]
"""Where the one line of a failed delivery goes (a reporter's `warn`)."""


def configured(
    config: ChainsConfig | None, sandboxes: Sequence[SandboxSettings | None] = ()
) -> Notifier:
    """The notifier of `config`'s `notify`, every URL read and parsed now (a ConfigError
    before anything starts); `sandboxes`: settings whose `env` must not carry a URL, besides
    the config's own."""
    if config is None or not config.notify:
        return Notifier()
    every = [*config.every_sandbox(), *sandboxes]
    names = [name for s in every if s is not None for name in s.env]
    return Notifier(resolve_targets(config.notify, container_env=names))


def run_ended(notifier: Notifier, run: ActiveRun, project: Path, say: Say | None) -> None:
    """The run's end (its record says how), linking to its page on a live `fks ui`."""
    if not notifier:
        return
    record = run.record
    link = page(project, f"/runs/{{project}}/{record.id}")
    run.add_deliveries(notifier.send(messages.run_ended(record, project, link), say))


def task_ended(
    notifier: Notifier,
    run: ActiveRun | None,
    *,
    task: tuple[str, str],
    status: WorkStatus,
    why: str,
    cost: str,
    project: Path,
    say: Say | None,
) -> None:
    """A forge task (`task`: its id and title) came to rest: landed, failed or stopped by the
    budget (a rest that is not told sends nothing)."""
    if not notifier:
        return
    notice = messages.task_ended(task[0], task[1], status, why, cost, project)
    if notice is not None:
        _kept(run, notifier.send(notice, say))


def question(
    notifier: Notifier,
    run: ActiveRun | None,
    *,
    task_id: str,
    text: str,
    project: Path,
    say: Say | None,
) -> None:
    """A forge task waits for an answer: linking to the board where it can be given."""
    if not notifier:
        return
    link = page(project, "/forge/{project}")
    _kept(run, notifier.send(messages.question(task_id, text, project, link), say))


def review(
    notifier: Notifier,
    run: ActiveRun | None,
    *,
    task_id: str,
    title: str,
    approved: bool,
    issues: Sequence[str],
    cost_usd: float,
    say: Say | None,
) -> None:
    """A forge review's verdict."""
    if not notifier:
        return
    notice = messages.review(task_id, title, approved, list(issues), cost_usd)
    _kept(run, notifier.send(notice, say))


def pull_request(
    notifier: Notifier,
    run: ActiveRun | None,
    *,
    url: str,
    title: str,
    updated: bool = False,
    say: Say | None = None,
) -> list[DeliveryRecord]:
    """A pull request fks opened (or, `updated`, pushed to again) at `url`; the deliveries
    are kept in `run`'s record when there is one, and returned."""
    if not notifier:
        return []
    run_id = run.record.id if run is not None else None
    notice = messages.pull_request(url, title, run_id=run_id, updated=updated)
    return _kept(run, notifier.send(notice, say))


def _kept(run: ActiveRun | None, deliveries: list[DeliveryRecord]) -> list[DeliveryRecord]:
    if run is not None:
        run.add_deliveries(deliveries)
    return deliveries
