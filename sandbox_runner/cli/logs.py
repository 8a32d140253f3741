"""`fks logs`: what a run's iterations wrote."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption
from sandbox_runner.cli.runs import RunArgument


@handled
def logs_cmd(
    run_id: RunArgument = "last",
    step: Annotated[int | None, typer.Argument(metavar="[STEP]", min=1)] = None,
    iteration: Annotated[
        int | None,
        typer.Option("--iteration", "-i", min=1, metavar="N", help="Only this iteration."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing output as a running run writes it."),
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="The bytes as the agent wrote them, unchanged.")
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            "-w",
            help="A Claude transcript's tool calls and results whole (up to 20,000 characters "
            "each), not cut to a line.",
        ),
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import logs

    options = logs.LogsOptions(
        run_ref=run_id, step=step, iteration=iteration, follow=follow, raw=raw, full=full, cwd=cwd
    )
    return logs.logs(options)


def register(app: typer.Typer) -> None:
    app.command(
        "logs",
        help="Print what a run's iterations wrote (STEP is a step number): a Claude transcript as"
        " readable text, other output with control sequences removed; --raw for the bytes as written.",
    )(logs_cmd)
