"""Secret masking never delays output that cannot be part of a secret."""

from __future__ import annotations

import itertools
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox_runner.records.masking import MASK, Masker

SECRET = "sk-ant-api03-" + "q" * 40


def test_chunk_not_ending_in_a_secret_prefix_is_emitted_whole() -> None:
    masker = Masker([SECRET])
    assert masker.feed(b"hello world\n") == b"hello world\n"
    assert masker.feed(b"no secret here") == b"no secret here"
    assert masker.finish() == b""


def test_only_the_possible_secret_prefix_is_held_back() -> None:
    masker = Masker([SECRET])
    assert masker.feed(b"key=sk-an") == b"key="
    # The next byte shows it was not a secret: everything is released at once.
    assert masker.feed(b"x done\n") == b"sk-anx done\n"
    assert masker.finish() == b""


@pytest.mark.parametrize("cuts", [(5,), (4, 20), (1, 30, 52)])
def test_secret_split_across_chunks_is_masked(cuts: tuple[int, ...]) -> None:
    data = f"a {SECRET} b\n".encode()
    bounds = [0, *cuts, len(data)]
    masker = Masker([SECRET])
    out = b"".join(masker.feed(data[s:e]) for s, e in itertools.pairwise(bounds))
    assert out + masker.finish() == f"a {MASK.decode()} b\n".encode()


def test_unfinished_prefix_is_released_by_finish() -> None:
    masker = Masker([SECRET])
    assert masker.feed(b"tail sk-ant") == b"tail "
    assert masker.finish() == b"sk-ant"


def test_agent_output_is_shown_while_the_agent_still_runs(project: Path) -> None:
    """With a credential set, a printed line appears at once (a kill -9 then loses nothing)."""
    agent = project / "slow.sh"
    agent.write_text('#!/bin/sh\necho "first line"\nsleep 200\n')
    agent.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_runner", "run", "./slow.sh"],
        cwd=project,
        env={**os.environ, "ANTHROPIC_API_KEY": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 100  # well before the agent ends
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"first line" not in seen and time.monotonic() < deadline:
                if sel.select(timeout=0.5):
                    seen += os.read(proc.stdout.fileno(), 4096)
        assert b"first line" in seen, seen
    finally:
        proc.kill()
        proc.wait()
