"""`fks forge land|retry|reset|show TASK`: one task's way through fks forge, by hand."""

import typer

from sandbox_runner.cli.common import (
    AllowOption,
    BaseOption,
    ConfigOption,
    CwdOption,
    EngineOption,
    ForgeJsonOption,
    ImageOption,
    MaxCostOption,
    SandboxOption,
    TaskArgument,
    handled,
)


@handled
def land_cmd(
    task: TaskArgument,
    base: BaseOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands.forge import ForgeOptions
    from sandbox_runner.commands.forge_task import land

    return land(ForgeOptions(base=base, cwd=cwd, config=config), task)


@handled
def retry_cmd(
    task: TaskArgument,
    sandbox: SandboxOption = False,
    base: BaseOption = None,
    image: ImageOption = None,
    engine: EngineOption = None,
    allow: AllowOption = None,
    max_cost: MaxCostOption = None,
    json_output: ForgeJsonOption = False,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands.forge import ForgeOptions
    from sandbox_runner.commands.forge_task import retry

    options = ForgeOptions(
        sandbox=sandbox,
        base=base,
        image=image,
        engine=engine,
        allow=tuple(allow or ()),
        max_cost=max_cost,
        json_output=json_output,
        cwd=cwd,
        config=config,
    )
    return retry(options, task)


@handled
def reset_cmd(task: TaskArgument, cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.reset(cwd=cwd, task=task)


@handled
def show_cmd(
    task: TaskArgument, cwd: CwdOption = None, json_output: ForgeJsonOption = False
) -> int:
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
