"""Shared fixtures: projects in tmp_path, fake agents on PATH, the CLI in-process."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fks_testing.agentclis import agent_clis  # noqa: F401  (a fixture)
from fks_testing.engines import second_engine, two_node_swarm  # noqa: F401  (fixtures)
from fks_testing.helpers import Result

FAKE_AGENT = Path(__file__).parent / "agents" / "fake_agent.py"

SWARM_GROUP = "swarm"
"""The xdist group of every test that makes the main engine a swarm manager, or needs it not to
be one: there is one swarm per machine, so these run one at a time, on one worker (`-n N
--dist loadgroup`)."""
ENGINES_GROUP = "engines"
"""The xdist group of the other tests of a second Docker engine: they share the worker's
(`second_engine`, one per worker), one at a time, beside the swarm's group."""
_SWARM_FIXTURES = frozenset({"two_node_swarm", "module_swarm"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that take a swarm fixture join SWARM_GROUP; other tests of `second_engine` join
    ENGINES_GROUP unless they name a group (modules and tests that make a swarm or start a
    SecondEngine themselves carry the mark)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if _SWARM_FIXTURES & fixtures:
            item.add_marker(pytest.mark.xdist_group(SWARM_GROUP))
        elif "second_engine" in fixtures and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(ENGINES_GROUP))


@pytest.fixture(autouse=True)
def _kept_in_its_xdist_group(request: pytest.FixtureRequest) -> None:
    """Under `--dist loadgroup`, xdist marks the node id of each test of a group `@GROUP`; a
    pytest and xdist that do not work together leave it out and scatter the group's tests
    over the workers (two swarms at once): such a test fails before it starts."""
    node = request.node
    if (
        request.config.getoption("loadgroup", default=False)
        and node.get_closest_marker("xdist_group")
        and "@" not in node.nodeid
    ):
        pytest.fail(
            "--dist loadgroup did not keep this test in its xdist group: this pytest-xdist "
            "does not work with this pytest; install the versions of pyproject.toml's test extra"
        )


@pytest.fixture(autouse=True)
def _claude_may_run_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests run as root in containers: fks refuses local Claude steps as root unless
    IS_SANDBOX=1 says the machine is a sandbox (tests of that refusal remove it).
    """
    monkeypatch.setenv("IS_SANDBOX", "1")


@pytest.fixture(autouse=True)
def _own_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fks's per-user state (the projects `fks ui --all` lists) in a folder of the test run's,
    never the machine's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "state"))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory with the fake agent on PATH as `fake`, `planner`, `builder`…"""
    proj = tmp_path / "proj"
    proj.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("fake", "planner", "builder", "reviewer", "noop"):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_AGENT} "$@"\n')
        wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "state"))
    for key in list(os.environ):
        if key.startswith("FAKE_") and key != "FAKE_STATE":
            monkeypatch.delenv(key)
    monkeypatch.chdir(proj)
    return proj


@pytest.fixture
def cli() -> Iterator[Any]:
    """Run the CLI in-process (typer's CliRunner); returns Result."""
    from typer.testing import CliRunner

    from sandbox_runner.cli import run as run_module
    from sandbox_runner.cli.app import app

    runner = CliRunner()

    def invoke(*args: str) -> Result:
        argv = run_module.split_agent_args(list(args))
        done = runner.invoke(app, argv, catch_exceptions=False)
        return Result(
            done.exit_code, done.stdout, done.stderr if done.stderr_bytes is not None else ""
        )

    yield invoke
    run_module.global_agent_args.clear()
