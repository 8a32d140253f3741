"""`fks forge land|retry|reset|show TASK`: one task's way through fks forge, by hand."""

import typer

from sandbox_runner.cli.common import forge_options, handled
from sandbox_runner.cli.options import (
    AllowOption,
    BaseOption,
    ConfigOption,
    CwdOption,
    EngineOption,
    ImageOption,
    JsonOption,
    MaxCostOption,
    SandboxOption,
    TaskIdArgument,
)


@handled
def land_cmd(
    task: TaskIdArgument,
    base: BaseOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    options = forge_options(locals())
    from sandbox_runner.commands.forge_task import land

    return land(options, task)


@handled
def retry_cmd(
    task: TaskIdArgument,
    sandbox: SandboxOption = False,
    base: BaseOption = None,
    image: ImageOption = None,
    engine: EngineOption = None,
    allow: AllowOption = None,
    max_cost: MaxCostOption = None,
    json_output: JsonOption = False,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    options = forge_options(locals())
    from sandbox_runner.commands.forge_task import retry

    return retry(options, task)


@handled
def reset_cmd(task: TaskIdArgument, cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.reset(cwd=cwd, task=task)


@handled
def show_cmd(task: TaskIdArgument, cwd: CwdOption = None, json_output: JsonOption = False) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.show(cwd=cwd, task=task, json_output=json_output)


def register(forge_app: typer.Typer) -> None:
    forge_app.command(
        "land",
        help=(
            "Land an approved task whose landing was blocked (no agent runs). Exit codes: 0 "
            "landed, 1 not (the reason shown), 2 not approved or usage error."
        ),
    )(land_cmd)
    forge_app.command(
        "retry",
        help=(
            "Run a failed or interrupted task again from the stage it stopped at, with fresh "
            "review retries (a rejected one goes back to Implement with the review). Exit codes "
            "as run."
        ),
    )(retry_cmd)
    forge_app.command(
        "reset",
        help="Forget a task's forge state: its next run starts from Analyze on a fresh branch.",
    )(reset_cmd)
    forge_app.command(
        "show",
        help="A task's history across runs: stages, attempts, costs, results, branch, commits.",
    )(show_cmd)
