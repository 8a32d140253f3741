"""The swarm a test module's tests share: making a two-node swarm and leaving it takes seconds,
and each of these tests keeps to what its own run makes (services, networks and containers
labelled with its run, volumes of its tmp_path), so one swarm serves a whole module. A test that
needs a swarm of its own (it kills a node, drains one, or starts from an empty engine) lives in
a module without this fixture: the main engine can be in one swarm at a time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fks_testing.engines import SecondEngine, TwoNodeSwarm


@pytest.fixture(scope="module")
def module_swarm(second_engine: SecondEngine) -> Iterator[TwoNodeSwarm]:
    """The main engine (manager) and the second engine (worker) in one swarm, made for the
    module's first test that asks for it and left by both nodes after its last test."""
    with TwoNodeSwarm(second_engine) as swarm:
        yield swarm
