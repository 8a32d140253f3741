"""`fks show RUN --network`: every request each iteration made through the sandbox's egress
proxy, as a table or as JSON. Host names and methods come from the agent: the table shows them
neutralised, JSON escapes every character outside ASCII."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sandbox_runner.commands.runs import load_run, local_time, open_store
from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.console.units import byte_count
from sandbox_runner.errors import EXIT_COMPLETE
from sandbox_runner.records.record import IterationRecord, RunRecord
from sandbox_runner.results.reported import RequestsRecord

_COLUMNS = ("REQUESTS", "METHOD", "DESTINATION", "STATUS", "RESULT", "SENT", "RECEIVED", "SECRET")
_NUMERIC = frozenset(("REQUESTS", "SENT", "RECEIVED"))


def show_network(*, run_ref: str, cwd: Path | None, json_output: bool) -> int:
    """Each iteration's requests through the egress proxy, or one line saying it had none."""
    store = open_store(cwd)
    record = load_run(store, run_ref)
    if json_output:
        print(json.dumps(network_json(record), indent=2))
        return EXIT_COMPLETE
    for line in describe_network(record):
        print(strip_escapes(line, keep=""))
    return EXIT_COMPLETE


def network_json(record: RunRecord) -> dict[str, Any]:
    """The run's audit: per step, per iteration, its network record (null: no proxy)."""
    return {
        "run": record.id,
        "steps": [
            {
                "index": step.index,
                "agent": step.agent,
                "iterations": [
                    {
                        "number": it.number,
                        "started": it.started.isoformat(),
                        "network": None if it.network is None else it.network.model_dump(),
                    }
                    for it in step.iterations
                ],
            }
            for step in record.steps
        ],
    }


def describe_network(record: RunRecord) -> Iterator[str]:
    iterations = [it for step in record.steps for it in step.iterations]
    if all(it.network is None for it in iterations):
        why = (
            "it ran without the sandbox"
            if not record.options.sandbox
            else "its steps went out without it (network open, or none without the model API), "
            "or an older fks ran it"
        )
        yield f"Run {record.id} made no requests through an egress proxy: {why}"
        return
    yield f"Run {record.id}: requests through the sandbox's egress proxy, per iteration"
    for step in record.steps:
        yield f"Step {step.index}: {step.agent}"
        for it in step.iterations:
            yield from _iteration(it)


def _iteration(it: IterationRecord) -> Iterator[str]:
    head = f"  #{it.number}  {local_time(it.started, '%H:%M:%S')}"
    network = it.network
    if network is None:
        yield f"{head}  no egress proxy"
        return
    total = network.total
    yield f"{head}  {total} request{'' if total == 1 else 's'}"
    if network.requests:
        yield from _table([_row(r) for r in network.requests], indent="      ")
    if network.more:
        yield (
            f"      and {network.more} more request{'' if network.more == 1 else 's'} of other "
            f"kinds: {byte_count(network.more_sent)} sent, {byte_count(network.more_received)} received"
        )


def _row(r: RequestsRecord) -> tuple[str, ...]:
    where = r.host if r.port is None else f"{r.host}:{r.port}"
    return (
        str(r.count),
        r.method,
        where,
        "-" if r.status is None else str(r.status),
        r.result,
        byte_count(r.sent, unit=False),
        byte_count(r.received, unit=False),
        r.secret or "-",
    )


def _table(rows: Sequence[tuple[str, ...]], *, indent: str) -> Iterator[str]:
    # Neutralised before measuring: what is dropped takes no width.
    safe = [
        tuple(" ".join(strip_escapes(cell, keep="").split()) or "?" for cell in row) for row in rows
    ]
    widths = [max(len(row[i]) for row in (_COLUMNS, *safe)) for i in range(len(_COLUMNS))]
    for row in (_COLUMNS, *safe):
        cells = [
            cell.rjust(width) if name in _NUMERIC else cell.ljust(width)
            for name, cell, width in zip(_COLUMNS, row, widths, strict=True)
        ]
        yield indent + "  ".join(cells).rstrip()
