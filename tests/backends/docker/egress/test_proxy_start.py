"""The egress proxy starts beside a step's first container (its agent waits for the proxy's
sockets): a proxy that cannot start still fails the run with one line before the agent runs,
and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.helpers import eventually_none
from fks_testing.sandboxed import add_script, branches, of_repo, sandbox

from sandbox_runner.images import base_image

pytestmark = pytest.mark.docker

AGENT = """#!/bin/sh
echo "AGENT RAN"
echo ran > ran.txt && git add ran.txt && git commit -qm ran
"""


def test_a_proxy_that_cannot_start_fails_the_run_before_the_agent_and_leaves_nothing(
    repo: Path,
) -> None:
    add_script(repo, "agent.sh", AGENT)
    before = branches(repo)
    runs = repo / ".forge" / "runs"
    # An image without Squid: the proxy's container exits as it starts.
    res = sandbox("./scripts/agent.sh:1", env={"FKS_PROXY_IMAGE": base_image.LOCAL_BASE_IMAGE})
    assert res.code == 2, res.output[-3000:]
    (line,) = res.stderr.splitlines()
    assert line.startswith("fks: The egress proxy container (")
    assert "exited before it was ready: sh: 1: squid: not found" in line
    assert "AGENT RAN" not in res.output
    assert branches(repo) == before
    assert not runs.exists() or list(runs.iterdir()) == []
    assert of_repo("ps", repo) == []
    eventually_none(lambda: of_repo("volume", repo), "the workspace")  # removed in the background
