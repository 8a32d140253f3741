"""The second-engine fixture (testing/fks_testing/engines.py) leaves nothing behind: its dockerd stopped by
pid, its namespace, veth and directory gone, whether the tests pass, fail or are interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Second engines of their own: with the other tests of a second engine (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("engines")]


INNER = """
import json, os, signal, time
from pathlib import Path

# Ctrl-C interrupts, as in a terminal, even when the suite was started with SIGINT ignored (a
# shell's `cmd &` without job control does that): Python then leaves it ignored, and the test
# would sleep its minute out.
signal.signal(signal.SIGINT, signal.default_int_handler)

def record(engine):
    # Written whole (renamed into place) and last: the Ctrl-C the outer test sends once it sees
    # the file then lands in the test's sleep, not in the middle of a request, where it could
    # be raised in a finalizer and lost.
    assert engine.client().ping()
    info = {"pid": engine.process.pid, "netns": engine.netns, "veth": engine.veth_host,
            "dir": str(engine.dir), "url": engine.url}
    path = Path(os.environ["ENGINE_INFO"])
    path.with_suffix(".tmp").write_text(json.dumps(info))
    os.replace(path.with_suffix(".tmp"), path)

def test_passes(second_engine):
    record(second_engine)

def test_fails(second_engine):
    record(second_engine)
    assert False, "on purpose"

def test_interrupted(second_engine):
    record(second_engine)
    time.sleep(60)
"""


def inner_pytest(tmp_path: Path, test: str) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "conftest.py").write_text(
        "from fks_testing.engines import second_engine  # noqa: F401\n"
    )
    (tmp_path / "test_inner.py").write_text(INNER)
    info = tmp_path / "engine.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_inner.py::{test}"],
        cwd=tmp_path,
        env={**os.environ, "ENGINE_INFO": str(info)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return process, info


def assert_nothing_left(info: dict[str, str | int]) -> None:
    pid = int(info["pid"])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert (
        str(info["netns"])
        not in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
    )
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert str(info["veth"]) not in links
    assert not Path(str(info["dir"])).exists()
    assert str(info["dir"]) not in Path("/proc/self/mounts").read_text()


@pytest.mark.parametrize(("test", "code"), [("test_passes", 0), ("test_fails", 1)])
def test_the_engine_is_gone_after_a_passing_or_failing_test(
    tmp_path: Path, test: str, code: int
) -> None:
    process, info = inner_pytest(tmp_path, test)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == code, out
    assert_nothing_left(json.loads(info.read_text()))


def test_the_engine_is_gone_after_ctrl_c(tmp_path: Path) -> None:
    process, info = inner_pytest(tmp_path, "test_interrupted")
    deadline = time.monotonic() + 90
    while not info.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert info.exists(), process.communicate()[0]
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 2, out  # pytest's "interrupted"
    assert_nothing_left(json.loads(info.read_text()))
