"""`fks run --sandbox --engine tcp://…` against a real second engine (testing/fks_testing/engines.py), which
cannot see this machine's disk: the base goes in as packs through the Docker API, commits come
out as bundles, the images are sent before the first iteration, and `fks clean` after a kill -9
leaves nothing on that engine. The same commits land as with a local run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fks_testing.claude import API_KEY, run_fks, run_record, subjects
from fks_testing.engines import StartedContainers
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import FKS, fks, git, init_repo, write_config
from fks_testing.teams import PLAN_MD, SPECS_MD, RalphAgents, Team

# The worker's second engine, one test at a time (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("engines")]
RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")

AGENT = """#!/bin/sh
# One note per iteration, committed; a file left uncommitted; the marker on the third note.
n=$(ls notes 2>/dev/null | wc -l)
mkdir -p notes && echo "note $n" > notes/n$n.txt && git add notes && git commit -qm "note $n"
echo "left by iteration $n" > left.txt
[ "$n" -lt 2 ] || echo FORKHESTRA_COMPLETE
"""


def on_engine(engine: Any, kind: str) -> list[str]:
    """Names (volumes) or ids (containers) of everything fks left on `engine`."""
    client = engine.client()
    if kind == "containers":
        return [
            c.id
            for c in client.containers.list(
                all=True, filters={"label": "fks.run"}, ignore_removed=True
            )
        ]
    return [v.name for v in client.volumes.list(filters={"label": "fks.run"})]


def history(repo: Path, ref: str = "main") -> list[tuple[str, str]]:
    """(subject, tree) of every commit, run ids left out: equal for two runs that made the same
    commits."""
    out = git(repo, "log", "--format=%s%x00%T", ref)
    pairs = [line.split("\0") for line in out.splitlines()]
    return [(RUN_ID.sub("RUN", subject), tree) for subject, tree in pairs]


def make_repo(path: Path) -> Path:
    repo = init_repo(path, {"README.md": "hello\n", "agent.sh": AGENT})
    (repo / "agent.sh").chmod(0o755)
    git(repo, "add", "agent.sh")
    git(repo, "commit", "-qm", "agent executable")
    return repo


def test_a_chain_on_a_tcp_engine_lands_the_commits_a_local_run_lands(
    second_engine: Any, tmp_path: Path
) -> None:
    chain = "./agent.sh:5 -> ./agent.sh:5"
    local = make_repo(tmp_path / "local")
    remote = make_repo(tmp_path / "remote")
    assert history(local) == history(remote)
    here = fks("run", chain, "--sandbox", cwd=local, timeout=300)
    assert here.code == 0, here.output
    with StartedContainers(second_engine.url) as started:
        there = fks(
            "run", chain, "--sandbox", "--engine", second_engine.url, cwd=remote, timeout=300
        )
    assert there.code == 0, there.output
    assert history(remote) == history(local)
    assert (remote / "notes" / "n3.txt").read_text() == "note 3\n"
    assert git(remote, "status", "--porcelain") == ""
    # The containers ran there, and nothing of the run is left on either engine.
    record = json.loads(next((remote / ".forge" / "runs").glob("*/run.json")).read_text())
    assert record["engine"] == second_engine.url
    ids = [it["container_id"] for s in record["steps"] for it in s["iterations"]]
    assert len(ids) == 4 and all(ids)
    assert set(ids) <= started.ids
    assert on_engine(second_engine, "containers") == []
    assert on_engine(second_engine, "volumes") == []


def test_the_agent_cannot_change_the_shipped_objects_for_the_next_step(
    second_engine: Any, tmp_path: Path
) -> None:
    """The object store on the engine is read-only to agents: step 1 cannot plant objects (or
    remove them) for step 2, which still starts on the exact base."""
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    attack = (
        "#!/bin/sh\n"
        "ls /fks/objects/pack >/dev/null || exit 1\n"
        "if touch /fks/objects/planted 2>/dev/null || rm -rf /fks/objects/pack 2>/dev/null; then\n"
        "  echo WROTE-OBJECTS; fi\n"
        "grep -q hello README.md && echo BASE-OK\n"
        "echo FORKHESTRA_COMPLETE\n"
    )
    (repo / "attack.sh").write_text(attack)
    (repo / "attack.sh").chmod(0o755)
    git(repo, "add", "attack.sh")
    git(repo, "commit", "-qm", "attack")
    done = fks(
        "run",
        "./attack.sh:1 -> ./attack.sh:1",
        "--sandbox",
        "--engine",
        second_engine.url,
        cwd=repo,
        timeout=300,
    )
    assert done.code == 0, done.output
    assert "WROTE-OBJECTS" not in done.output
    assert done.output.count("BASE-OK") == 2


def test_settings_the_engine_cannot_honour_are_one_line_before_anything_starts(
    second_engine: Any, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    shared = tmp_path / "shared"
    shared.mkdir()
    write_config(repo, {"sandbox": {"mounts": [str(shared)]}})
    done = fks("run", "./agent.sh:1", "--sandbox", "--engine", second_engine.url, cwd=repo)
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: sandbox.mounts: engine {second_engine.url} cannot see this machine's paths "
        f"({shared}); remove sandbox.mounts or run on the local engine\n"
    )
    write_config(repo, {"agents": {"w": {"systemPromptText": "hi"}}})
    done = fks(
        "run",
        "w:1",
        "--sandbox",
        "--engine",
        second_engine.url,
        cwd=repo,
        env={"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"},
    )
    assert done.code == 2, done.output
    assert done.stderr == (
        "fks: ANTHROPIC_BASE_URL http://127.0.0.1:9 is on this machine, which containers on "
        f"engine {second_engine.url} cannot reach; give an address that engine reaches\n"
    )
    assert not (repo / ".forge" / "runs").exists()
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


def test_kill_9_then_fks_clean_leaves_nothing_on_the_engine_and_keeps_the_commits(
    second_engine: Any, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    slow = (
        "#!/bin/sh\n"
        "echo kept > kept.txt && git add kept.txt && git commit -qm 'kept commit'\n"
        "echo half > half.txt\n"
        "echo STARTED-SLEEPING\n"
        "sleep 120\n"
    )
    (repo / "slow.sh").write_text(slow)
    (repo / "slow.sh").chmod(0o755)
    git(repo, "add", "slow.sh")
    git(repo, "commit", "-qm", "slow agent")
    log = tmp_path / "fks.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [FKS, "run", "./slow.sh:2", "--sandbox", "--engine", second_engine.url],
            cwd=repo,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while b"STARTED-SLEEPING" not in log.read_bytes():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert on_engine(second_engine, "containers") and on_engine(second_engine, "volumes")
    done = fks("clean", cwd=repo, timeout=300)
    assert done.code == 0, done.output
    assert f"on {second_engine.url}" in done.stdout
    assert on_engine(second_engine, "containers") == []
    assert on_engine(second_engine, "volumes") == []
    branch = next(b for b in git(repo, "branch", "--format=%(refname:short)").split() if "/" in b)
    assert subjects(repo, branch)[:2] == [
        f"fks: what ./slow.sh left uncommitted when run {branch.split('/')[1]} stopped",
        "kept commit",
    ]
    assert git(repo, "show", f"{branch}:half.txt") == "half"


@pytest.mark.claude
@pytest.mark.timeout(600)
def test_ralph_chain_on_a_tcp_engine(second_engine: Any, tmp_path: Path) -> None:
    """The real claude in containers on the other engine, the fake API on an address that
    engine reaches, through the egress proxy there: the commits a local run lands."""
    repo = init_repo(tmp_path / "project", {"README.md": "# project\n"})
    assert run_fks("init", cwd=repo, timeout=60).code == 0
    (repo / "ralph" / "PLAN.md").write_text(PLAN_MD)
    (repo / "ralph" / "SPECS.md").write_text(SPECS_MD)
    git(repo, "add", "ralph", "system-prompts", "forge")
    git(repo, "commit", "-qm", "Add fks Ralph setup")
    agents = RalphAgents()
    with FakeAnthropic(host="0.0.0.0") as fake:
        fake.responder = agents
        env = {
            "ANTHROPIC_BASE_URL": f"http://{second_engine.host_ip}:{fake.port}",
            "ANTHROPIC_API_KEY": API_KEY,
        }
        res = run_fks(
            "run",
            "--chain",
            "ralph",
            "--sandbox",
            "--engine",
            second_engine.url,
            cwd=repo,
            env=env,
            timeout=420,
        )
    assert not agents.errors, agents.errors
    assert res.code == 0, res.tail()
    log = subjects(repo)
    assert "plan: greeting and farewell" in log
    assert sum(1 for s in log if s.endswith(": done")) == 2, log
    assert (repo / "greeting.txt").read_text() == "hello\n"
    assert (repo / "farewell.txt").read_text() == "goodbye\n"
    record = run_record(repo)
    assert record["status"] == "complete" and record["engine"] == second_engine.url
    assert on_engine(second_engine, "containers") == []
    assert on_engine(second_engine, "volumes") == []


@pytest.mark.claude
@pytest.mark.timeout(600)
def test_forge_tasks_on_a_tcp_engine_land(second_engine: Any, tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    write_config(repo, {"forge": {"parallel": 2, "maxTurns": 5}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    for title in ("one", "two"):
        done = run_fks("forge", "create", title, "--description", f"Write {title}.txt", cwd=repo)
        assert done.code == 0, done.tail()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tasks")
    team = Team()
    with FakeAnthropic(host="0.0.0.0", responder=team) as fake:
        env = {
            "ANTHROPIC_BASE_URL": f"http://{second_engine.host_ip}:{fake.port}",
            "ANTHROPIC_API_KEY": API_KEY,
        }
        res = run_fks(
            "forge", "run", "--sandbox", "--engine", second_engine.url, "--json",
            cwd=repo, env=env, timeout=500,
        )  # fmt: skip
    assert not team.errors, team.errors
    assert res.code == 0, res.tail()
    assert {t["status"] for t in res.json["tasks"]} == {"completed"}, res.tail()
    assert (repo / "one.txt").read_text() == "one\n"
    assert (repo / "two.txt").read_text() == "two\n"
    assert on_engine(second_engine, "containers") == []
    assert on_engine(second_engine, "volumes") == []
