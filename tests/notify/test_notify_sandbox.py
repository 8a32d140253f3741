"""A sandboxed run's notification URL stays on this machine: not in the agent's environment
or files, not in any container fks made for the run (`docker inspect`), yet the run's end
is sent with it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from fks_testing.helpers import FKS, init_repo
from fks_testing.notifysink import notify_sink
from fks_testing.sandboxed import add_script, configure, of_repo

HALF = "tokSecretSandbox"
TOKEN = HALF + "Path7Qx2Lm9Pw4Rt8"


def agent(flags: Path) -> str:
    # The token in two halves: the script itself (in the workspace) does not hold it.
    return f"""#!/bin/sh
k="{HALF}""{TOKEN.removeprefix(HALF)}"
echo "env=$(env | grep -c "$k")"
echo "files=$(grep -rl "$k" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l)"
while [ ! -e {flags}/go ]; do sleep 0.1; done
"""


@pytest.mark.docker
def test_the_url_never_enters_a_container(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README.md": "hello\n"})
    flags = tmp_path / "flags"
    flags.mkdir()
    add_script(repo, "look.sh", agent(flags))
    with notify_sink() as sink:
        configure(repo, {"sandbox": {"mounts": [str(flags)]}, "notify": [{"env": "FKS_TEST_HOOK"}]})
        env = {"FKS_TEST_HOOK": sink.url("json", f"hook/{TOKEN}")}
        proc = subprocess.Popen(
            [FKS, "run", "./scripts/look.sh", "--sandbox"],
            cwd=repo,
            env={**env, "PATH": str(Path(FKS).parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 180
            runs = repo / ".forge" / "runs"
            while not any("files=" in p.read_text() for p in runs.glob("*/01-*/001.log")):
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "the agent never ran"
                time.sleep(0.1)
            made = of_repo("ps", repo)
            assert made, "no container of the run is there to inspect"
            inspected = subprocess.run(
                ["docker", "inspect", *made], capture_output=True, text=True, check=True
            ).stdout
            assert json.loads(inspected) and TOKEN not in inspected and HALF not in inspected
        finally:
            (flags / "go").touch()
            out = proc.communicate(timeout=120)[0]
        (post,) = sink.wait_for(1)
    assert proc.returncode == 0, out
    assert "env=0" in out and "files=0" in out, out
    assert "complete" in post.text and TOKEN not in out
