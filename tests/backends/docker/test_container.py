"""Sandbox settings checked before anything starts, the container's defaults (read-only root,
limits, OOM), and credentials only where a step needs them - against the real engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fks_testing.helpers import fks, git
from fks_testing.sandboxed import (
    add_script,
    configure,
    containers,
    nothing_started,
    record,
    sandbox,
)

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cpus": 1000}, "cpus: 1000 is more than the"),
        ({"memory": "1b"}, "memory: '1b' is below the minimum of 64m"),
        ({"mounts": ["relative/dir"]}, "mounts[0]: 'relative/dir' is not an absolute path"),
        ({"mounts": ["/nonexistent/fks-dir"]}, "mounts[0]: /nonexistent/fks-dir does not exist"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(
    repo: Path, settings: dict[str, object], message: str
) -> None:
    configure(repo, {"sandbox": settings})
    for args in (("--dry-run",), ()):
        res = sandbox("./scripts/commit.sh:2", *args)
        assert res.code == 2, res.output
        assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "Traceback" not in res.output
    res = fks("validate")
    assert res.code == 2 and message in res.stderr, res.output
    nothing_started(repo)


def test_agent_missing_from_the_image_is_refused_up_front(repo: Path) -> None:
    for args in (("--dry-run",), ()):
        res = sandbox("no-such-agent-in-image:2", *args)
        assert res.code == 2, res.output
        assert "Agent 'no-such-agent-in-image' not found in the image" in res.stderr
    nothing_started(repo)


PROBE = r"""#!/bin/sh
touch /usr/fks-root-write 2>/dev/null && echo "root writable" || echo "root read-only"
touch /tmp/x && echo "tmp writable"
touch "$HOME/x" && echo "home writable"
touch /workspace/x && echo "workspace writable"
if [ -r /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  echo "memory $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
  echo "pids $(cat /sys/fs/cgroup/pids/pids.max)"
else
  echo "memory $(cat /sys/fs/cgroup/memory.max)"
  echo "pids $(cat /sys/fs/cgroup/pids.max)"
fi
echo "key=${ANTHROPIC_API_KEY:-unset}"
echo FORKHESTRA_COMPLETE
"""


def test_defaults_read_only_root_and_limits(repo: Path) -> None:
    add_script(repo, "probe.sh", PROBE)
    res = sandbox("./scripts/probe.sh:1", "--dry-run")
    assert (
        "read-only root filesystem, memory 4g, pids 4096, timeout 3600s per iteration" in res.stdout
    )
    res = sandbox("./scripts/probe.sh:1")
    assert res.code == 0, res.output
    out = res.stdout
    assert "root read-only" in out
    assert "tmp writable" in out and "home writable" in out and "workspace writable" in out
    assert f"memory {4 * 2**30}" in out and "pids 4096" in out
    configure(repo, {"sandbox": {"memory": "256m", "pidsLimit": 64}})
    res = sandbox("./scripts/probe.sh:1")
    assert f"memory {256 * 2**20}" in res.stdout and "pids 64" in res.stdout, res.output


def test_oom_is_reported_with_the_limit(repo: Path) -> None:
    add_script(
        repo,
        "hog.sh",
        "#!/bin/sh\nexec python3 -c 'x = bytearray(400 * 2**20); print(\"FORKHESTRA_COMPLETE\")'\n",
    )
    configure(repo, {"sandbox": {"memory": "128m"}})
    res = sandbox("./scripts/hog.sh:1")
    assert res.code == 1, res.output
    assert "out of memory (limit 128m); raise sandbox.memory in forge/chains.json" in res.stdout
    assert record(repo)["steps"][0]["iterations"][0]["reason"] == "oom"


def test_credentials_only_for_steps_that_need_them(repo: Path) -> None:
    add_script(repo, "probe.sh", PROBE)
    key = {"ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdef"}
    res = sandbox("./scripts/probe.sh:1", env=key)
    assert res.code == 0, res.output
    assert "key=unset" in res.stdout  # a plain agent never gets the key
    configure(repo, {"sandbox": {"env": ["ANTHROPIC_API_KEY"]}})
    res = sandbox("./scripts/probe.sh:1", env=key)
    assert "key=********" in res.stdout  # listed in sandbox.env: its choice, still masked
    assert key["ANTHROPIC_API_KEY"] not in res.output


def test_live_runs_are_never_cleaned(
    repo: Path, tmp_path: Path, second_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Containers of a run whose process lives are kept, whatever their state; other
    repositories' dead runs only go with --all.

    On an engine of the test's own: `fks clean --all` takes every dead run on the engine,
    and the dead runs other tests leave on the main engine (to clean them themselves) are
    not this test's to take."""
    monkeypatch.setenv("DOCKER_HOST", second_engine.url)  # fks and the docker CLI alike
    image = "fks-test-empty:1"
    empty = subprocess.run(["tar", "-cf", "-", "-T", "/dev/null"], capture_output=True, check=True)
    subprocess.run(["docker", "import", "-", image], input=empty.stdout, check=True)
    alive = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = []
    try:
        for run, pid, where in (
            ("live-other", alive.pid, tmp_path / "elsewhere"),
            ("live-here", alive.pid, repo),
            ("dead-other", dead.pid, tmp_path / "elsewhere"),
        ):
            labels = {"fks.run": run, "fks.pid": str(pid), "fks.repo": str(where)}
            made.append(
                subprocess.run(
                    [
                        "docker",
                        "create",
                        *[f"--label={k}={v}" for k, v in labels.items()],
                        image,
                        "true",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip()
            )
        res = fks("clean")
        assert res.code == 0, res.output
        short = [c[:12] for c in made]
        assert [c for c in short if c in containers()] == short
        res = fks("clean", "--all")
        assert res.code == 0 and "run dead-other" in res.stdout, res.output
        assert [c for c in short if c in containers()] == short[:2]
    finally:
        alive.kill()
        subprocess.run(["docker", "rm", "-f", *made], capture_output=True)


def test_clean_takes_a_removal_already_in_progress_in_stride() -> None:
    import docker.errors
    from requests import Response

    from sandbox_runner.backends.docker.cleanup import remove_container

    class Busy:
        def remove(self, force: bool) -> None:
            response = Response()
            response.status_code = 409
            raise docker.errors.APIError("removal of container is already in progress", response)

    assert remove_container(Busy()) is False


def test_dry_run_json_names_the_workspace(repo: Path) -> None:
    res = sandbox("./scripts/commit.sh:2", "--dry-run", "--json")
    assert res.code == 0, res.output
    data = json.loads(res.stdout)
    assert data["steps"][0]["cwd"] == "/workspace (in the container)"
    assert git(repo, "branch", "--format=%(refname:short)") == "main"
