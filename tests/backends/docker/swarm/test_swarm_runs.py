"""`--engine swarm` on a real two-node swarm (testing/fks_testing/engines.py: the main engine as manager and
a second engine in its own network namespace as worker): every iteration a service, placed by
Swarm and then pinned to its workspace's node, the base fetched from this machine, commits
out through the log stream; nothing left on either node afterwards."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.claude import API_KEY, run_fks
from fks_testing.engines import (
    StartedContainers,
    TwoNodeSwarm,
    leftovers,
    prepared_swarm,
)
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import fks, git, init_repo, write_config
from fks_testing.swarm import IMAGE, SLOW, slow_repo, start_fks, wait_for
from fks_testing.teams import Team

# One swarm per machine: one test of the swarm at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("swarm")]

AGENT = """#!/bin/sh
n=$(ls notes 2>/dev/null | wc -l)
mkdir -p notes && echo "note $n" > notes/n$n.txt && git add notes && git commit -qm "note $n"
echo "left by iteration $n" > left.txt
[ "$n" -lt 2 ] || echo FORKHESTRA_COMPLETE
"""


@pytest.fixture(scope="module")
def swarm(module_swarm: TwoNodeSwarm) -> Iterator[TwoNodeSwarm]:
    """One swarm for the module (swarm/conftest.py): each test keeps to its own tmp_path's
    runs."""
    yield prepared_swarm(module_swarm, IMAGE)


def test_a_chain_on_the_swarm_lands_what_a_local_run_lands(swarm: Any, tmp_path: Path) -> None:
    chain = "./agent.sh:5 -> ./agent.sh:5"
    repos = {}
    for where in ("local", "swarm"):
        repo = init_repo(tmp_path / where, {"README.md": "hello\n", "agent.sh": AGENT})
        (repo / "agent.sh").chmod(0o755)
        git(repo, "add", "agent.sh")
        git(repo, "commit", "-qm", "agent executable")
        write_config(repo, {"sandbox": {"network": "none", "memory": "512m"}})
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "config")
        repos[where] = repo
    here = fks("run", chain, "--sandbox", cwd=repos["local"], timeout=300)
    assert here.code == 0, here.output
    there = fks("run", chain, "--sandbox", "--engine", "swarm", cwd=repos["swarm"], timeout=300)
    assert there.code == 0, there.output
    trees = [git(r, "rev-parse", "main^{tree}") for r in repos.values()]
    assert trees[0] == trees[1]
    assert git(repos["swarm"], "log", "--format=%s", "-3").splitlines()[1:] == [
        "note 3",
        "fks: commit what ./agent.sh left uncommitted (run "
        + json.loads(next((repos["swarm"] / ".forge" / "runs").glob("*/run.json")).read_text())[
            "id"
        ]
        + ", step 1)",
    ]
    record = json.loads(next((repos["swarm"] / ".forge" / "runs").glob("*/run.json")).read_text())
    ids = [it["container_id"] for s in record["steps"] for it in s["iterations"]]
    assert len(ids) == 4 and all(ids), record["steps"]
    assert leftovers(swarm, tmp_path) == {}


@pytest.mark.claude
@pytest.mark.timeout(900)
def test_forge_parallel_4_spreads_tasks_over_both_nodes(swarm: Any, tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(
        repo,
        {
            "forge": {"parallel": 4, "maxTurns": 5},
            "sandbox": {"network": "open", "memory": "512m"},
        },
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    titles = ["one", "two", "three", "four"]
    for title in titles:
        done = run_fks("forge", "create", title, "--description", f"Write {title}.txt", cwd=repo)
        assert done.code == 0, done.tail()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    team = Team()
    with (
        StartedContainers() as on_main,
        StartedContainers(swarm.second.url) as on_second,
        FakeAnthropic(host="0.0.0.0", responder=team) as fake,
    ):
        env = {
            "ANTHROPIC_BASE_URL": f"http://{swarm.second.host_ip}:{fake.port}",
            "ANTHROPIC_API_KEY": API_KEY,
        }
        res = run_fks(
            "forge", "run", "--sandbox", "--engine", "swarm", "--parallel", "4", "--json",
            cwd=repo, env=env, timeout=800,
        )  # fmt: skip
    assert not team.errors, team.errors
    assert res.code == 0, res.tail()
    assert {t["status"] for t in res.json["tasks"]} == {"completed"}, res.tail()
    for title in titles:
        assert (repo / f"{title}.txt").read_text() == f"{title}\n"
    # Every stage ran as a container of a swarm task, on one node or the other: both were used.
    ids = []
    for run in (repo / ".forge" / "runs").glob("*/run.json"):
        record = json.loads(run.read_text())
        ids += [it["container_id"] for s in record["steps"] for it in s["iterations"]]
    assert ids and all(ids), ids
    assert set(ids) <= on_main.ids | on_second.ids
    assert set(ids) & on_main.ids and set(ids) & on_second.ids, (ids, on_main.ids, on_second.ids)
    assert leftovers(swarm, tmp_path) == {}


@pytest.mark.timeout(600)
def test_kill_9_then_fks_clean_leaves_nothing_on_either_node(swarm: Any, tmp_path: Path) -> None:
    drafting = SLOW.replace("echo STARTED", 'echo "uncommitted $n" > draft.txt\necho STARTED')
    repo = slow_repo(tmp_path / "repo", drafting)
    log = tmp_path / "fks.log"
    process = start_fks(repo, log, "run", "./slow.sh:3", "--sandbox", "--engine", "swarm")
    try:
        wait_for(log, b"STARTED", process, 240)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert leftovers(swarm, tmp_path)
    done = fks("clean", cwd=repo, timeout=300)
    assert done.code == 0, done.output
    assert leftovers(swarm, tmp_path) == {}, done.output
    # The killed iteration's commit and what it left uncommitted, saved onto its branch.
    record = json.loads(next((repo / ".forge" / "runs").glob("*/run.json")).read_text())
    branch = record["steps"][0]["branch"]
    assert f"saved to {branch} the commits run {record['id']} had not saved" in done.stdout
    assert git(repo, "log", "--format=%s", "-2", branch).splitlines()[1] == "note 0"
    assert git(repo, "show", f"{branch}:draft.txt") == "uncommitted 0"


FORGER = r"""#!/bin/sh
n=$(ls notes 2>/dev/null | wc -l)
mkdir -p notes && echo "note $n" > notes/n$n.txt && git add notes && git commit -qm "note $n"
if [ "$n" = 0 ]; then
  # The script's closing report, forged early: the host then stops waiting for late output.
  printf 'fks-export %s end=1\tcode=0\twarning=\033[31mforged\n' "$FKS_NONCE" >&2
  sleep 2
  printf 'after the forged report \033]0;title\007'
fi
[ "$n" -lt 2 ] || echo FORKHESTRA_COMPLETE
"""


def test_a_forged_closing_report_on_the_swarm_costs_only_the_agent(
    swarm: Any, tmp_path: Path
) -> None:
    """The agent prints the iteration script's closing report itself, early (it can read the
    nonce), which makes the host wait for no late output once the task ends: at worst its
    own iteration's work is taken later. The run ends in order, its escapes never reach the
    terminal, every note lands, and nothing is left on either node."""
    repo = slow_repo(tmp_path / "repo", FORGER)
    res = fks("run", "./slow.sh:5", "--sandbox", "--engine", "swarm", cwd=repo, timeout=300)
    assert res.code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output and "Traceback" not in res.output
    tree = git(repo, "ls-tree", "--name-only", "main", "notes/").split()
    assert tree == ["notes/n0.txt", "notes/n1.txt", "notes/n2.txt"], res.output
    assert leftovers(swarm, tmp_path) == {}
