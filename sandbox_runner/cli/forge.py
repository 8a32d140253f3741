"""`fks forge …`: the analyze -> implement -> review pipeline, and what it asks of a human."""

from pathlib import Path
from typing import Annotated

import typer

from sandbox_runner.cli import forge_task
from sandbox_runner.cli.common import forge_options, handled
from sandbox_runner.cli.options import (
    AcOption,
    AllowOption,
    BaseOption,
    ConfigOption,
    CwdOption,
    DependsOnOption,
    DescriptionOption,
    EngineOption,
    ImageOption,
    JsonOption,
    LabelOption,
    MaxCostOption,
    PriorityOption,
    SandboxOption,
    StatusOption,
    TaskIdArgument,
    TitleArgument,
)

TasksArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="[TASK_ID]...", help="Tasks to process (default: every ready one)."),
]
ParallelOption = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        "-j",
        metavar="N",
        help="Tasks processed at once (default: forge.parallel, 1).",
    ),
]
MaxTaskCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-task-cost",
        metavar="USD",
        help="Fail a task once it has spent this many USD (default: forge.maxTaskCost).",
    ),
]
ResumeOption = Annotated[
    bool,
    typer.Option("--resume", help="Also continue tasks an interrupted run left unfinished."),
]
JunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit", metavar="FILE", help="Write a JUnit XML report (one test case per task)."
    ),
]


@handled
def run_cmd(
    tasks: TasksArgument = None,
    parallel: ParallelOption = None,
    sandbox: SandboxOption = False,
    base: BaseOption = None,
    image: ImageOption = None,
    engine: EngineOption = None,
    allow: AllowOption = None,
    max_cost: MaxCostOption = None,
    max_task_cost: MaxTaskCostOption = None,
    resume: ResumeOption = False,
    force: Annotated[
        bool, typer.Option("--force", help="Process the named tasks anew, even landed ones.")
    ] = False,
    json_output: JsonOption = False,
    junit: JunitOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    options = forge_options(locals())
    from sandbox_runner.commands.forge import run

    return run(options)


@handled
def worker_cmd(
    task: TaskIdArgument,
    session: Annotated[str, typer.Option("--session")],
    mode: Annotated[str, typer.Option("--mode")] = "named",
    sandbox: SandboxOption = False,
    base: BaseOption = None,
    image: ImageOption = None,
    engine: EngineOption = None,
    allow: AllowOption = None,
    max_cost: MaxCostOption = None,
    max_task_cost: MaxTaskCostOption = None,
    resume: ResumeOption = False,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    options = forge_options(locals())
    from sandbox_runner.commands.forge import worker

    return worker(options, task)


@handled
def status_cmd(cwd: CwdOption = None, json_output: JsonOption = False) -> int:
    from sandbox_runner.commands import forge_backlog

    return forge_backlog.status(cwd=cwd, json_output=json_output)


@handled
def clarifications_cmd(cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge_backlog

    return forge_backlog.clarifications(cwd=cwd)


@handled
def answer_cmd(
    task: TaskIdArgument,
    text: Annotated[str | None, typer.Argument(metavar="[TEXT]", help="The answer.")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", metavar="FILE", help="Read the answer from FILE.")
    ] = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.answer(cwd=cwd, task=task, text=text, file=file)


@handled
def create_cmd(
    title: TitleArgument,
    description: DescriptionOption = "",
    ac: AcOption = None,
    label: LabelOption = None,
    priority: PriorityOption = "medium",
    depends_on: DependsOnOption = None,
    status: StatusOption = "To Do",
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands.forge_backlog import CreateOptions, create

    options = CreateOptions(
        title=title,
        cwd=cwd,
        description=description,
        criteria=tuple(ac or ()),
        labels=tuple(label or ()),
        priority=priority,
        depends_on=tuple(depends_on or ()),
        status=status,
    )
    return create(options)


@handled
def parent_cmd(ctx: typer.Context, cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge_backlog

    return forge_backlog.parent(cwd=cwd, args=list(ctx.args))


def register(app: typer.Typer) -> None:
    forge_app = typer.Typer(
        help=(
            "The analyze -> implement -> review pipeline over forge-tasks: each ready task is "
            "analyzed, implemented on its own branch, reviewed (and sent back when rejected), "
            "then landed through a merge queue. Tasks run in parallel, each in its own worktree "
            "or, with --sandbox, containers."
        ),
        no_args_is_help=True,
    )
    forge_app.command(
        "run",
        help=(
            "Process ready tasks (To Do, dependencies Done), or the given ones, up to --parallel "
            "at a time. Exit codes: 0 every task landed, 1 one did not (failed, waiting for an "
            "answer, or --max-cost), 2 usage/config error, 130 interrupted."
        ),
    )(run_cmd)
    forge_app.command("_worker", hidden=True)(worker_cmd)
    forge_task.register(forge_app)
    forge_app.command(
        "status", help="Each task's status, stage, attempts, cost, branch, and what it waits for."
    )(status_cmd)
    forge_app.command("clarifications", help="Questions the agents need a human to answer.")(
        clarifications_cmd
    )
    forge_app.command(
        "answer", help="Answer a task's question; the next `fks forge run` continues the task."
    )(answer_cmd)
    forge_app.command("create", help="Add a task (the same as `forge-tasks create`).")(create_cmd)
    forge_app.command(
        "parent",
        help=(
            "Talk to an interactive Claude that drives these subcommands for you (fks is "
            "replaced by `claude`; arguments after -- go to it)."
        ),
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(parent_cmd)
    app.add_typer(forge_app, name="forge")
