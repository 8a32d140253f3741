"""`fks show`: one recorded run, step by step."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption
from sandbox_runner.errors import UsageError

RunArgument = Annotated[str, typer.Argument(metavar="RUN")]
"""A run id, an id prefix or `last` (`fks show`, `fks logs`, `fks review`)."""


@handled
def show_cmd(
    run_id: RunArgument = "last",
    network: Annotated[
        bool,
        typer.Option(
            "--network",
            help="Show every request each iteration made through the sandbox's egress proxy "
            "(allowed or refused): destination, method, HTTP status, the proxy's result, "
            "bytes both ways, whether a secret was added; the 50 kinds made most per "
            "iteration, the rest summed up.",
        ),
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="With --network: print the requests as JSON.")
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import runs

    if json_output and not network:
        raise UsageError("--json goes with --network: fks show RUN --network --json")
    if network:
        from sandbox_runner.commands import network as network_view

        return network_view.show_network(run_ref=run_id, cwd=cwd, json_output=json_output)
    return runs.show(run_ref=run_id, cwd=cwd)


def register(app: typer.Typer) -> None:
    app.command(
        "show",
        help="Show a run's steps and iterations (--network: their requests through the egress "
        "proxy). RUN is an id, an id prefix or `last`.",
    )(show_cmd)
