"""`forge-tasks` / `fks tasks`: parse options, call `sandbox_runner.tasks.commands`, map errors to exit 2.

Options it shares with `fks` (`--cwd`, `--json`, task ids, a new task's fields) come from
`sandbox_runner.cli.options`. Agents call this often, so it starts light: typer, the standard
library and small package modules (no pydantic, no YAML) at module level; each verb imports
`tasks.commands` and the task store (pydantic and YAML, about 0.3 s of CPU at every start)
when it runs. Annotations are not postponed (typer evaluates them at every start otherwise).
"""

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec

import typer
from typer.core import TyperGroup

from sandbox_runner.cli.options import (
    AcOption,
    CwdOption,
    DependsOnOption,
    DescriptionOption,
    JsonOption,
    LabelOption,
    PriorityOption,
    StatusOption,
    TaskIdArgument,
    TitleArgument,
)
from sandbox_runner.console.pipes import tolerate_closed_pipes
from sandbox_runner.errors import FksError
from sandbox_runner.paths import working_directory

P = ParamSpec("P")
EXIT_USAGE = 2
# click's UsageError (vendored inside typer by recent versions): BadParameter's base class.
_ClickUsageError: type[Exception] = typer.BadParameter.__mro__[1]


class _OneLineErrors(TyperGroup):
    """Report bad options and arguments as one `forge-tasks: …` line instead of a usage block."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _ClickUsageError as exc:
            failed = getattr(exc, "ctx", None) or ctx  # the (sub)command whose arguments were bad
            message = str(exc.format_message())  # type: ignore[attr-defined]
            _fail(f"{message.rstrip('.')} (see `{failed.command_path} --help`)")


app = typer.Typer(
    cls=_OneLineErrors,
    help=(
        "The forge-tasks task database: one Markdown file per task under forge/tasks/.\n\n"
        "The project root is the nearest directory holding forge/ at or above the current "
        "directory or --cwd (else the git top level, else that directory); override it with "
        "--root or $FORGE_TASKS_ROOT. "
        "Exit codes: 0 success, 2 bad id/option/status (one line on stderr)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        metavar="DIR",
        envvar="FORGE_TASKS_ROOT",
        help="Project root holding forge/tasks/ (default: found from the current directory).",
        show_default=False,
    ),
]
PlainOption = Annotated[
    bool, typer.Option("--plain", help="Plain text (the default): stable, no colour.")
]


def _fail(message: str) -> NoReturn:
    print(f"forge-tasks: {message}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)


def _handled(fn: Callable[P, int]) -> Callable[P, None]:
    """Turn a command's return code and expected errors into typer exits: one line, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = fn(*args, **kwargs)
        except FksError as exc:
            _fail(str(exc))
        raise typer.Exit(code)

    return wrapper


def _root(root: Path | None, cwd: Path | None) -> Path | None:
    """The project root: --root (or $FORGE_TASKS_ROOT) as given, else the one found from
    --cwd as from the current directory (None: found from the current directory)."""
    if cwd is None:
        return root
    from sandbox_runner.tasks.store import find_root

    start = working_directory(cwd)  # checked like fks's --cwd, whatever else is given
    return root if root is not None else find_root(start)


def _as_json(plain: bool, json_output: bool) -> bool:
    if plain and json_output:
        _fail("--plain and --json exclude each other; pass one")
    return json_output


@app.command("create", help='Create a task and print "Created TASK-xxxxxx".')
@_handled
def create_cmd(
    title: TitleArgument,
    description: DescriptionOption = "",
    ac: AcOption = None,
    label: LabelOption = None,
    priority: PriorityOption = "medium",
    depends_on: DependsOnOption = None,
    status: StatusOption = "To Do",
    root: RootOption = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.tasks import commands

    return commands.create(
        root=_root(root, cwd),
        title=title,
        description=description,
        criteria=ac or [],
        labels=label or [],
        priority=priority,
        depends_on=depends_on or [],
        status=status,
    )


@app.command("list", help="List tasks: priority (high first), then creation order.")
@_handled
def list_cmd(
    ready: Annotated[
        bool, typer.Option("--ready", help="Only To Do tasks whose dependencies are all Done.")
    ] = False,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            metavar="STATUS",
            help="Only tasks with this status (repeatable).",
            show_default=False,
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            "-l",
            metavar="LABEL",
            help="Only tasks carrying this label (repeatable: all of them).",
            show_default=False,
        ),
    ] = None,
    plain: PlainOption = False,
    json_output: JsonOption = False,
    root: RootOption = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.tasks import commands

    return commands.list_tasks(
        root=_root(root, cwd),
        ready=ready,
        statuses=status or [],
        labels=label or [],
        as_json=_as_json(plain, json_output),
    )


@app.command("view", help="Show one task: fields, description, acceptance criteria, notes.")
@_handled
def view_cmd(
    task_id: TaskIdArgument,
    plain: PlainOption = False,
    json_output: JsonOption = False,
    root: RootOption = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.tasks import commands

    return commands.view(
        root=_root(root, cwd), task_ref=task_id, as_json=_as_json(plain, json_output)
    )


# `forge-tasks edit`'s arguments and options, so that `edit_cmd` reads as a parameter list.
EditTitleOption = Annotated[
    str | None, typer.Option("--title", metavar="TEXT", help="New title.", show_default=False)
]
EditDescriptionOption = Annotated[
    str | None,
    typer.Option(
        "--description",
        "-d",
        metavar="TEXT",
        help="New description (replaces the old one).",
        show_default=False,
    ),
]
EditStatusOption = Annotated[
    str | None,
    typer.Option(
        "--status",
        "-s",
        metavar="STATUS",
        help="To Do, In Progress, Done or Blocked (todo, in-progress, done … work too).",
        show_default=False,
    ),
]
EditPriorityOption = Annotated[
    str | None,
    typer.Option(
        "--priority", "-p", metavar="PRIORITY", help="high, medium or low.", show_default=False
    ),
]
EditAddLabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--add-label", metavar="LABEL", help="Add a label (repeatable).", show_default=False
    ),
]
EditRemoveLabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--remove-label", metavar="LABEL", help="Remove a label (repeatable).", show_default=False
    ),
]
EditAddDependencyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--add-dependency",
        "--depends-on",
        metavar="TASK_ID",
        help="Add a dependency on an existing task (repeatable).",
        show_default=False,
    ),
]
EditRemoveDependencyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--remove-dependency",
        metavar="TASK_ID",
        help="Drop a dependency (repeatable).",
        show_default=False,
    ),
]
EditAddAcOption = Annotated[
    list[str] | None,
    typer.Option(
        "--ac",
        "--add-ac",
        metavar="TEXT",
        help="Append an acceptance criterion (repeatable).",
        show_default=False,
    ),
]
EditCheckAcOption = Annotated[
    list[int] | None,
    typer.Option(
        "--check-ac",
        metavar="N",
        help="Check acceptance criterion #N (repeatable).",
        show_default=False,
    ),
]
EditUncheckAcOption = Annotated[
    list[int] | None,
    typer.Option(
        "--uncheck-ac",
        metavar="N",
        help="Uncheck acceptance criterion #N (repeatable).",
        show_default=False,
    ),
]
EditAppendNotesOption = Annotated[
    str | None,
    typer.Option(
        "--append-notes",
        metavar="TEXT",
        help="Append a paragraph to the notes.",
        show_default=False,
    ),
]


@app.command("edit", help='Change a task and print "Updated TASK-xxxxxx".')
@_handled
def edit_cmd(
    task_id: TaskIdArgument,
    title: EditTitleOption = None,
    description: EditDescriptionOption = None,
    status: EditStatusOption = None,
    priority: EditPriorityOption = None,
    add_label: EditAddLabelOption = None,
    remove_label: EditRemoveLabelOption = None,
    add_dependency: EditAddDependencyOption = None,
    remove_dependency: EditRemoveDependencyOption = None,
    ac: EditAddAcOption = None,
    check_ac: EditCheckAcOption = None,
    uncheck_ac: EditUncheckAcOption = None,
    append_notes: EditAppendNotesOption = None,
    root: RootOption = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.tasks import commands

    changes = commands.Changes(
        title=title,
        description=description,
        status=status,
        priority=priority,
        add_labels=add_label or [],
        remove_labels=remove_label or [],
        add_dependencies=add_dependency or [],
        remove_dependencies=remove_dependency or [],
        add_criteria=ac or [],
        check=check_ac or [],
        uncheck=uncheck_ac or [],
        append_notes=append_notes,
    )
    return commands.edit(root=_root(root, cwd), task_ref=task_id, changes=changes)


def main() -> None:
    tolerate_closed_pipes()
    app(prog_name="forge-tasks")


if __name__ == "__main__":
    main()
