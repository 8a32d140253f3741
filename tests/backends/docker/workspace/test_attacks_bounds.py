"""An agent in the sandbox whose small bundle would cost the host dearly: a commit that fills
the disk once checked out, a bundle header naming a great many refs. Run with the real CLI and
Docker; the user's branch and checkout must be untouched and the failure one clear line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.attacks import (
    EX,
    KILL_WRAPPER,
    MARK,
    OWN_INFO,
    Host,
    one_line,
    step_tip,
)
from fks_testing.helpers import git
from fks_testing.sandboxed import record, sandbox

pytestmark = pytest.mark.docker

# One MiB of zeros committed under 200 names, none of them in the agent's work tree (marked
# skip-worktree in its index, so nothing looks uncommitted): a bundle of a few KiB, 200 MiB
# once checked out.
ZEROS = """
head -c 1048576 /dev/zero > /tmp/z && oid=$(git hash-object -w /tmp/z) && rm /tmp/z
i=0
while [ $i -lt 200 ]; do printf '100644 %s\\tzeros/z%d\\n' "$oid" $i; i=$((i+1)); done |
    git update-index --index-info
git ls-files zeros | git update-index --skip-worktree --stdin
git commit -qm 'agent zeros'
"""


def test_one_zero_blob_under_many_names_leaves_the_checkout_untouched(
    repo: Path, host: Host
) -> None:
    res = sandbox(
        host.agent(ZEROS + MARK) + ":1", env={"FKS_MAX_MERGE_BYTES": str(64 * 1024 * 1024)}
    )
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    line = one_line(res, "FKS_MAX_MERGE_BYTES")
    assert "could not update 'main'" in line and "writes more than" in line
    assert not (repo / "zeros").exists()
    listed = git(repo, "ls-tree", "-r", "--name-only", step_tip(repo), "zeros").splitlines()
    assert len(listed) == 200  # the branch keeps the step's commit, for review
    assert record(repo)["steps"][0]["merged"] is False


def test_a_bundle_header_naming_many_refs_is_refused(repo: Path, host: Host) -> None:
    """100,000 refs in the header of the agent's own bundle (6 MB before its pack)."""
    body = f"""
echo work > work.txt && git add work.txt && git commit -qm 'agent work'
{OWN_INFO}
tip=$(git rev-parse HEAD)
{{ printf "# v2 git bundle\\n%s refs/heads/%s\\n" $tip "$FKS_BRANCH"
  seq 100000 | sed "s|^|$tip refs/tags/t|"
  printf "\\n"
  git rev-list --objects HEAD --not $FKS_SINCE | git pack-objects -q --stdout; }} > {EX}/bundle
{MARK}
{KILL_WRAPPER}
"""
    res = sandbox(host.agent(body) + ":1")
    assert res.code == 1, res.output[-3000:]
    host.check(res)
    assert "its header is over" in one_line(res, "refused")
    assert step_tip(repo) == host.refs["refs/heads/main"]
