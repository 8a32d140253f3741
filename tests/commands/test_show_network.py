"""`fks show RUN --network` (and `--json`) on run records: each iteration's requests through
the egress proxy as a table that neutralises the agent's host names, or as JSON; a run without
a proxy says so in one line. (tests/backends/docker/egress/test_network.py: a real run.)"""

from __future__ import annotations

import json
from pathlib import Path

from fks_testing.helpers import fks
from fks_testing.runs import (
    complete_run,
    incomplete_run,
    recorded_project,  # noqa: F401  (the fixture `project`)
)

from sandbox_runner.paths import write_atomic
from sandbox_runner.records.record import RunRecord
from sandbox_runner.results.reported import NetworkRecord, RequestsRecord

HOSTILE = "\x1b]0;owned\x07evil\x1b[2J\u202egpj.sh\u2066.test"


def _requests(host: str, **kw: object) -> RequestsRecord:
    fields: dict[str, object] = {
        "port": 443,
        "method": "CONNECT",
        "status": 200,
        "result": "TCP_TUNNEL",
        "count": 1,
        "sent": 10,
        "received": 20,
    }
    return RequestsRecord.model_validate({**fields, **kw, "host": host})


def audited_run(project: Path, *networks: NetworkRecord | None, sandbox: bool = True) -> str:
    """A run of three steps (one iteration, two, none) whose iterations recorded `networks`, in
    order."""
    run_id = incomplete_run(project)
    path = project / ".forge" / "runs" / run_id / "run.json"
    rec = RunRecord.model_validate_json(path.read_text())
    rec.options.sandbox = sandbox
    iterations = [it for step in rec.steps for it in step.iterations]
    for it, network in zip(iterations, networks, strict=False):
        it.network = network
    write_atomic(path, rec.model_dump_json())
    return run_id


def test_show_network_lists_each_iterations_requests(project: Path) -> None:
    first = NetworkRecord(
        requests=[
            _requests("github.com", count=3, sent=1500, received=90000),
            _requests("api.test", method="POST", result="TCP_MISS", secret="model API", count=2),
            _requests("evil.test", port=80, method="GET", status=403, result="TCP_DENIED"),
        ],
        more=7,
        more_sent=70,
        more_received=140,
    )
    run_id = audited_run(project, first, NetworkRecord(), None)
    shown = fks("show", run_id, "--network", cwd=project)
    assert shown.code == 0 and shown.stderr == "", shown.output
    lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert "#1" in lines[2] and lines[2].endswith("13 requests"), lines
    assert lines[3:8] == [
        "REQUESTS METHOD DESTINATION STATUS RESULT SENT RECEIVED SECRET",
        "3 CONNECT github.com:443 200 TCP_TUNNEL 1,500 90,000 -",
        "2 POST api.test:443 200 TCP_MISS 10 20 model API",
        "1 GET evil.test:80 403 TCP_DENIED 10 20 -",
        "and 7 more requests of other kinds: 70 bytes sent, 140 bytes received",
    ], lines
    assert lines[8:] == [
        "Step 2: ./scripts/fail.sh",
        lines[9].split()[0] + " " + lines[9].split()[1] + " 0 requests",
        lines[10].split()[0] + " " + lines[10].split()[1] + " no egress proxy",
        "Step 3: ./scripts/ok.sh",
    ], lines
    assert lines[9].startswith("#1") and lines[10].startswith("#2"), lines

    as_json = fks("show", run_id, "--network", "--json", cwd=project)
    assert as_json.code == 0, as_json.output
    data = json.loads(as_json.stdout)
    iterations = [it for step in data["steps"] for it in step["iterations"]]
    assert data["run"] == run_id and [it["number"] for it in iterations] == [1, 1, 2]
    assert iterations[0]["network"] == first.model_dump()
    assert iterations[0]["network"]["requests"][1]["secret"] == "model API"
    assert iterations[1]["network"] == NetworkRecord().model_dump()
    assert iterations[2]["network"] is None
    # The plain view counts them and says where to look.
    plain = fks("show", run_id, cwd=project).stdout
    assert "REQUESTS" not in plain
    counted = [line.strip() for line in plain.splitlines() if "network:" in line]
    assert counted == ["network: 13 requests through the egress proxy (fks show --network)"]


def test_hostile_host_names_are_shown_neutralised(project: Path) -> None:
    imitation = "[fks]\nMerged\rfks/x/1\x00into\u2028main"
    network = NetworkRecord(
        requests=[
            _requests(HOSTILE, count=2),
            _requests(imitation, method="GET\x1b[31m", secret="\u202eterces"),
        ]
    )
    run_id = audited_run(project, network)
    shown = fks("show", run_id, "--network", cwd=project)
    assert shown.code == 0, shown.output
    text = shown.stdout
    assert "\x1b" not in text and "\x07" not in text and "\x00" not in text and "\r" not in text
    assert not any(c in text for c in "\u202e\u2066\u2028")
    assert "evil<U+202E>gpj.sh<U+2066>.test:443" in text
    assert "<U+202E>terces" in text
    # Nothing an agent named starts a line of its own: every line is fks's.
    assert not [line for line in text.splitlines() if line.startswith(("[fks]", "Merged"))]
    rows = [line for line in text.splitlines() if "TCP_TUNNEL" in line]
    assert len(rows) == 2 and "[fks]Mergedfks/x/1into<U+2028>main:443" in rows[1], rows
    as_json = fks("show", run_id, "--network", "--json", cwd=project)
    assert as_json.stdout.isascii() and "\x1b" not in as_json.stdout
    hosts = [
        r["host"]
        for r in json.loads(as_json.stdout)["steps"][0]["iterations"][0]["network"]["requests"]
    ]
    assert hosts == [HOSTILE, imitation]


def test_a_run_without_a_proxy_says_so_in_one_line(project: Path) -> None:
    run_id = audited_run(project, sandbox=False)
    shown = fks("show", run_id, "--network", cwd=project)
    assert shown.code == 0, shown.output
    assert shown.stdout.splitlines() == [
        f"Run {run_id} made no requests through an egress proxy: it ran without the sandbox"
    ]
    sandboxed = audited_run(project, sandbox=True)
    [line] = fks("show", sandboxed, "--network", cwd=project).stdout.splitlines()
    assert line.startswith(f"Run {sandboxed} made no requests through an egress proxy: its steps")


def test_json_goes_with_network(project: Path) -> None:
    run_id = complete_run(project)
    done = fks("show", run_id, "--json", cwd=project)
    assert done.code == 2 and done.stdout == "", done.output
    assert done.stderr.strip().splitlines() == [
        "fks: --json goes with --network: fks show RUN --network --json"
    ]


def test_records_without_an_audit_still_load(project: Path) -> None:
    """A run.json written before fks recorded requests (no `network` keys) is shown as before."""
    run_id = complete_run(project)
    path = project / ".forge" / "runs" / run_id / "run.json"
    data = json.loads(path.read_text())
    for step in data["steps"]:
        for it in step["iterations"]:
            it.pop("network", None)
    path.write_text(json.dumps(data))
    assert fks("show", run_id, cwd=project).code == 0
    shown = fks("show", run_id, "--network", "--json", cwd=project)
    assert (
        shown.code == 0 and json.loads(shown.stdout)["steps"][0]["iterations"][0]["network"] is None
    )
