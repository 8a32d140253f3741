"""`fks forge run`: the analyze → implement → review pipeline over forge-tasks, one worker
process per task (`fks forge _worker`); `forge_task` and `forge_backlog` hold the other verbs."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast, get_args

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.forge_view import forge_view
from sandbox_runner.console.output import PlainReporter, plural
from sandbox_runner.console.units import usd
from sandbox_runner.errors import (
    EXIT_COMPLETE,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    Interrupted,
    UsageError,
)
from sandbox_runner.forge.agents import stage_agents
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.report import item_json, summary_line, write_junit
from sandbox_runner.forge.scheduler import Conductor, ForgeView, session_config, worker_argv
from sandbox_runner.forge.selection import (
    forge_base,
    forge_lock,
    named_tasks,
    picker,
    ready_tasks,
)
from sandbox_runner.forge.stages import ForgeContext
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.forge.worker import Mode, process_task
from sandbox_runner.git.repo import open_repo
from sandbox_runner.images.devcontainer import DEVCONTAINER, ensure_for_run
from sandbox_runner.notify import events as notify_events
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.paths import project_dir
from sandbox_runner.plan.config import ChainsConfig, config_path, load_config
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.forge_settings import ForgeSettings
from sandbox_runner.plan.notify import entry_urls, url_secrets
from sandbox_runner.plan.pr import PrSettings
from sandbox_runner.plan.sandbox import SandboxSettings, files_read, merge_sandbox_settings
from sandbox_runner.pulls.target import PrTarget, check_target, resolve_target
from sandbox_runner.records.masking import masked_names, secrets_from_env
from sandbox_runner.records.store import new_run_id, project_root
from sandbox_runner.runs.lifecycle import BackendSpec, checked_backend
from sandbox_runner.signals import signals_as_interrupts
from sandbox_runner.steps.guards import DEFAULT_STALL_TIMEOUT
from sandbox_runner.steps.tap import LogLimits

EXIT_SKIPPED = 3
"""A worker found its task held by another `fks forge run`."""


@dataclass(frozen=True)
class ForgeOptions:
    """`fks forge run`'s options (also what each worker process is started with, and what
    `fks forge land|retry` take)."""

    tasks: Sequence[str] = ()
    cwd: Path | None = None
    config: Path | None = None
    parallel: int | None = None
    sandbox: bool = False
    base: str | None = None
    image: str | None = None
    engine: str | None = None
    allow: Sequence[str] = ()
    max_cost: float | None = None
    max_task_cost: float | None = None
    resume: bool = False
    force: bool = False
    """Process the named tasks anew, even a landed one."""
    mode: str = "named"
    """A worker's: how its task was chosen (forge.worker.Mode)."""
    json_output: bool = False
    junit: Path | None = None
    session: str | None = None


@dataclass
class _Setup:
    project: Path
    config: ChainsConfig | None
    settings: ForgeSettings
    sandbox: SandboxSettings | None
    base: str


def _setup(options: ForgeOptions) -> _Setup:
    workdir = project_dir(options.cwd, config=options.config)
    repo = open_repo(workdir, what="fks forge")
    cfg = load_config(config_path(workdir, options.config), cwd=workdir, required=False)
    settings = cfg.forge if cfg is not None else ForgeSettings()
    sandbox = None
    if options.sandbox:
        sandbox = merge_sandbox_settings(
            cfg.sandbox if cfg else None,
            image=options.image,
            engine=options.engine,
            allow=options.allow,
        )
    elif options.image or options.allow or options.engine:
        raise UsageError("--image, --engine and --allow only apply to --sandbox runs")
    return _Setup(repo.top, cfg, settings, sandbox, forge_base(repo.top, options.base))


def _context(setup: _Setup, session: str, options: ForgeOptions) -> ForgeContext:
    return ForgeContext(
        repo=open_repo(setup.project, what="fks forge"),
        base=setup.base,
        settings=setup.settings,
        reporter=PlainReporter(out=sys.stdout, agent_out=sys.stdout.buffer),
        session=session,
        sandbox=setup.sandbox,
        secrets=sorted(
            {*secrets_from_env(masked_names(setup.sandbox)), *_notify_masks(setup.config)},
            key=len,
            reverse=True,
        ),
        max_cost=options.max_cost,
        max_task_cost=options.max_task_cost or setup.settings.max_task_cost,
        stall_after=_stall_after(setup.config),
        log_limits=LogLimits.of_config(setup.config),
        secret_files=files_read(
            [setup.sandbox, *(setup.config.every_sandbox() if setup.config else ())],
            setup.project,
        ),
        notifier=notify_events.configured(setup.config, [setup.sandbox]),
        pr=_pr_target(setup),
        agents=setup.config.agents if setup.config is not None else {},
    )


def _notify_masks(cfg: ChainsConfig | None) -> list[str]:
    return url_secrets(entry_urls(cfg.notify)) if cfg is not None else []


def _pr_target(setup: _Setup) -> PrTarget | None:
    """Where tasks go with `forge.land: "pr"` (the top-level `pr` settings; the branch is
    each task's)."""
    if setup.settings.land != "pr":
        return None
    settings = (setup.config.pr if setup.config else None) or PrSettings()
    return resolve_target(settings, project=setup.project, run_base=setup.base, label="forge")


def _stall_after(cfg: ChainsConfig | None) -> float | None:
    stall = cfg.stall_timeout if cfg is not None else None
    return (DEFAULT_STALL_TIMEOUT if stall is None else stall) or None


def _preflight(setup: _Setup, ctx: ForgeContext) -> None:
    """Everything a worker would find wrong, found before any worker starts."""
    if ctx.pr is not None:
        check_target(ctx.pr)
    agents = stage_agents(ctx.settings, ctx.agents, ctx.project)
    spec = BackendSpec(setup.project, agents, setup.sandbox, base=setup.base, checked_base=True)
    checked_backend(spec, [Step(agent=name) for name in agents])


def run(options: ForgeOptions) -> int:
    """`fks forge run`: returns 0 when every task landed, 1 when one did not, 130 interrupted."""
    _check_numbers(options)
    if options.force and not options.tasks:
        raise UsageError("--force redoes named tasks only: fks forge run --force TASK_ID")
    setup = _setup(options)
    session = new_run_id()
    ctx = _context(setup, session, options)
    out = sys.stderr if options.json_output else sys.stdout
    for problem in TaskBoard(setup.project).problems():
        print(f"[fks] Warning: {problem}", file=out)
    named = named_tasks(setup.project, options.tasks, force=options.force) if options.tasks else []
    tasks = named or ready_tasks(setup.project, options.resume)
    if not tasks:
        print("[fks] No ready tasks (forge-tasks list --ready); nothing to do", file=out)
        if options.json_output:
            print(json.dumps({"session": session, "cost_usd": 0, "tasks": []}, indent=2))
        return EXIT_COMPLETE
    if setup.sandbox is not None and setup.sandbox.image == DEVCONTAINER:
        # Built once, now, for every worker: a task landing a new devcontainer.json or
        # Dockerfile must not decide (and build, on an open network) the next task's image.
        options = replace(options, image=ensure_for_run(setup.project, say=sys.stderr))
        setup = _setup(options)
        ctx = _context(setup, session, options)
    _preflight(setup, ctx)
    return _conduct(options, setup, session, named, len(tasks))


def _conduct(
    options: ForgeOptions, setup: _Setup, session: str, named: list[str], count: int
) -> int:
    """Runs the workers under the base's forge lock; the exit code of `fks forge run`."""
    parallel = options.parallel or setup.settings.parallel
    mode = "force" if options.force else "named" if options.tasks else "ready"
    view = _view(options, count, lambda: _session_spent(setup.project, session))
    stack = contextlib.ExitStack()
    config = stack.enter_context(session_config(config_path(setup.project, options.config)))
    conductor = Conductor(
        pick=picker(setup.project, named, resume=options.resume),
        parallel=parallel,
        argv_for=worker_argv(
            [*_worker_args(options, setup, config), "--session", session, "--mode", mode]
        ),
        view=view,
        cwd=setup.project,
        keep_going=lambda: not _over_budget(setup.project, session, options.max_cost),
    )
    try:
        with stack, signals_as_interrupts(), forge_lock(setup.project, setup.base, session):
            view.note(
                f"Forge {session}: {plural(count, 'task')}, {parallel} at a time, on '{setup.base}'"
            )
            codes = conductor.run()
    except Interrupted as exc:
        view.close()
        print(
            f"[fks] Interrupted ({exc.signal_name}); continue with: fks forge run --resume",
            file=sys.stderr,
        )
        _write_outputs(setup, conductor.started, session, options)
        return EXIT_INTERRUPTED
    except BaseException:
        view.close()
        raise
    view.close()
    items = _write_outputs(setup, conductor.started, session, options)
    done = all(i.status == WorkStatus.COMPLETED for i in items) and len(items) == len(
        conductor.started
    )
    return (
        EXIT_COMPLETE
        if done and all(c in (0, EXIT_SKIPPED) for c in codes.values())
        else EXIT_INCOMPLETE
    )


def _view(options: ForgeOptions, total: int, spent: Callable[[], float]) -> ForgeView:
    return forge_view(sys.stderr if options.json_output else sys.stdout, total=total, spent=spent)


def _check_numbers(options: ForgeOptions) -> None:
    if options.max_cost is not None and not (
        math.isfinite(options.max_cost) and options.max_cost > 0
    ):
        raise UsageError(f"--max-cost must be a positive amount of USD, got {options.max_cost:g}")
    task = options.max_task_cost
    if task is not None and not (math.isfinite(task) and task > 0):
        raise UsageError(f"--max-task-cost must be a positive amount of USD, got {task:g}")
    if options.parallel is not None and not 0 < options.parallel <= 64:
        raise UsageError(f"--parallel must be between 1 and 64, got {options.parallel}")


def _session_spent(project: Path, session: str) -> float:
    """What this `fks forge run` spent (a task it resumed counts only from here)."""
    return sum(i.session_cost for i in WorkStore(project).items() if i.session == session)


def _over_budget(project: Path, session: str, max_cost: float | None) -> bool:
    return max_cost is not None and _session_spent(project, session) >= max_cost


def _worker_args(options: ForgeOptions, setup: _Setup, config: Path) -> list[str]:
    """Workers read `config`, the session's copy of its config file, never the project's."""
    args = ["--cwd", str(setup.project), "--base", setup.base, "--config", str(config)]
    if options.sandbox:
        args.append("--sandbox")
    if options.image:
        args += ["--image", options.image]
    if options.engine:
        args += ["--engine", options.engine]
    for entry in options.allow:
        args += ["--allow", entry]
    if options.max_cost is not None:
        args += ["--max-cost", repr(options.max_cost)]
    if options.max_task_cost is not None:
        args += ["--max-task-cost", repr(options.max_task_cost)]
    if options.resume:
        args.append("--resume")
    return args


def worker(options: ForgeOptions, task_id: str) -> int:
    """One task in this process (what `fks forge run` starts per task)."""
    if not options.session:
        raise UsageError("a forge worker needs --session")
    if options.mode not in get_args(Mode):
        raise UsageError(f"--mode must be one of {', '.join(get_args(Mode))}")
    setup = _setup(options)
    ctx = _context(setup, options.session, options)
    try:
        with signals_as_interrupts():
            item = process_task(
                ctx,
                task_id,
                max_cost=options.max_cost,
                mode=cast(Mode, options.mode),
            )
    except Interrupted:
        print("[fks] Interrupted: the task's branch is kept; fks forge run --resume continues it")
        return EXIT_INTERRUPTED
    if item is None:
        return EXIT_SKIPPED
    return EXIT_COMPLETE if item.status == WorkStatus.COMPLETED else EXIT_INCOMPLETE


def _write_outputs(
    setup: _Setup, tasks: Sequence[str], session: str, options: ForgeOptions
) -> list[WorkItem]:
    store = WorkStore(setup.project)
    items = [i for i in store.items() if i.task_id in tasks]
    spent = sum(i.session_cost for i in items if i.session == session)
    total = sum(i.cost_usd for i in items)
    out = sys.stderr if options.json_output else sys.stdout
    for item in items:
        print(f"[fks] {strip_escapes(summary_line(item, session), keep='')}", file=out)
    earlier = f" (with earlier runs of these tasks: {usd(total)})" if total > spent else ""
    print(f"[fks] Cost of this run {usd(spent)}{earlier}", file=out)
    if options.json_output:
        print(
            json.dumps(
                {
                    "session": session,
                    "cost_usd": round(spent, 6),
                    "tasks_cost_usd": round(total, 6),
                    "tasks": [
                        {**item_json(i), "session_cost_usd": round(i.session_cost, 6)}
                        for i in items
                    ],
                },
                indent=2,
            )
        )
    if options.junit is not None:
        write_junit(options.junit, items)
    return items


def _project(cwd: Path | None) -> Path:
    return project_root(project_dir(cwd))
