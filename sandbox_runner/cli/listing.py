"""`fks runs`: the recorded runs, filtered."""

from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import CwdOption


@handled
def runs_cmd(
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Only runs started since WHEN: an age (30m, 12h, 7d, 2w) or a date [and time].",
        ),
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Only runs with this status (running, complete, incomplete, interrupted, "
            "failed, died); repeatable or comma-separated.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", min=0, metavar="N", help="Only the newest N of those."),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the runs and totals as JSON.")
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import listing

    selection = listing.RunFilter(
        since=listing.parse_since(since) if since is not None else None,
        statuses=listing.parse_statuses(status or []),
        limit=limit,
    )
    return listing.list_runs(cwd=cwd, selection=selection, json_output=json_output)


def register(app: typer.Typer) -> None:
    app.command(
        "runs",
        help=(
            "List recorded runs (id, chain, start, duration, status, steps, cost), oldest first, "
            "then the totals; a `fks forge run`'s task runs are grouped under it with their titles."
        ),
    )(runs_cmd)
