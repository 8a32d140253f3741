"""An iteration's bundle carried in its output stream (workspace/logged_bundle.py): bounded,
its digest checked, whatever the chunks, with what an agent could print to fool it; a local
container prints only a small one (FKS_EXPORT_VIA=log-small), a larger one is read from the
stopped container."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandbox_runner.backends.docker.workspace.export import ExportError, ReportFilter, script
from sandbox_runner.backends.docker.workspace.logged_bundle import LoggedBundle, SmallInOutput


def bundle_lines(nonce: str, data: bytes, *, width: int = 65536) -> bytes:
    import base64

    text = base64.b64encode(data)
    lines = [text[i : i + width] for i in range(0, len(text), width)]
    body = b"".join(b"fks-bundle %s %s\n" % (nonce.encode(), line) for line in lines)
    return body + b"fks-bundle-end %s %s\n" % (
        nonce.encode(),
        hashlib.sha256(data).hexdigest().encode(),
    )


def fed(taken: LoggedBundle, stream: bytes, size: int) -> bytes:
    pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
    return b"".join(taken.feed(piece) for piece in pieces) + taken.finish()


@pytest.mark.parametrize("size", [1, 7, 16384, 1 << 20])
def test_logged_bundle_passes_every_other_byte_whatever_the_chunks(
    tmp_path: Path, size: int
) -> None:
    data = os.urandom(120_000)
    nonce = "n0nce"
    stream = b"before fks-bundl" + b"e x\npartial" + bundle_lines(nonce, data) + b"after\n"
    taken = LoggedBundle(nonce, tmp_path / "b")
    assert fed(taken, stream, size) == b"before fks-bundle x\npartialafter\n"
    bundle = taken.result()
    assert bundle is not None and bundle.read_bytes() == data


def test_logged_bundle_none_when_the_stream_has_none(tmp_path: Path) -> None:
    taken = LoggedBundle("n", tmp_path / "b")
    wrong = b"fks-bundle other QUFB\nfks-bundle-end other 00\n"
    assert fed(taken, wrong, 5) == wrong  # another nonce: the agent's own output
    assert taken.result() is None and not (tmp_path / "b").exists()


def forged_after_end(nonce: str, data: bytes) -> bytes:
    return bundle_lines(nonce, data) + b"fks-bundle-end %s %s\n" % (
        nonce.encode(),
        hashlib.sha256(b"forged").hexdigest().encode(),
    )


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (lambda n, d: bundle_lines(n, d).replace(b"end n ", b"end n 0"), "sha256"),
        (lambda n, d: bundle_lines(n, d)[:-80], "cut off"),
        (lambda n, d: bundle_lines(n, d).rsplit(b"fks-bundle-end", 1)[0], "no end line"),
        (forged_after_end, "a line after its end"),
        (lambda n, d: bundle_lines(n, d) + bundle_lines(n, b"again"), "a line after its end"),
        (lambda n, d: b"fks-bundle n ***\n" + bundle_lines(n, d), "not base64"),
        (lambda n, d: b"fks-bundle n " + b"A" * 200_000 + b"\n", "too long"),
        (lambda n, d: b"fks-bundle-end n 00\n", "ends before it begins"),
    ],
)
def test_logged_bundle_refuses_a_malformed_one_and_keeps_nothing(
    tmp_path: Path, stream: Any, reason: str
) -> None:
    taken = LoggedBundle("n", tmp_path / "b")
    fed(taken, stream("n", os.urandom(100_000)), 4096)
    with pytest.raises(ExportError, match=reason):
        taken.result()
    assert not (tmp_path / "b").exists()


def test_logged_bundle_over_the_limit_is_refused(tmp_path: Path) -> None:
    taken = LoggedBundle("n", tmp_path / "b", limit=100_000)
    fed(taken, bundle_lines("n", os.urandom(100_001)), 65536)
    with pytest.raises(ExportError, match="larger than 100000 bytes"):
        taken.result()
    assert not (tmp_path / "b").exists()


def reported(nonce: str, line: bytes) -> ReportFilter:
    report = ReportFilter(nonce)
    report.feed(b"fks-export %s %s\n" % (nonce.encode(), line))
    return report


def test_a_small_bundle_comes_in_the_output_and_a_large_one_from_the_container(
    tmp_path: Path,
) -> None:
    env: dict[str, str] = {}
    channel = SmallInOutput(env, "n", tmp_path / "b", 200_000)
    assert env == {"FKS_EXPORT_VIA": "log-small", "FKS_LOG_BUNDLE_BYTES": "200000"}
    data = os.urandom(1000)
    assert fed(channel._logged, b"out\n" + bundle_lines("n", data), 100) == b"out\n"
    export = channel.taken(reported("n", b"end=1\tbundle=1"))
    assert export is not None and export.complete and export.bundle == tmp_path / "b"
    assert export.bundle.read_bytes() == data

    larger = SmallInOutput({}, "n", tmp_path / "c", 200_000)  # the script printed none
    assert larger.taken(reported("n", b"end=1\tbundle=1")) is None  # read from the container
    assert larger.taken(ReportFilter("n")) is None  # no report: the same
    nothing = larger.taken(reported("n", b"end=1"))
    assert nothing is not None and nothing.complete and nothing.bundle is None


def test_a_forged_small_bundle_fails_the_export_rather_than_falling_back(tmp_path: Path) -> None:
    channel = SmallInOutput({}, "n", tmp_path / "b", 1000)
    fed(channel._logged, bundle_lines("n", os.urandom(1001)), 64)
    with pytest.raises(ExportError, match="larger than 1000 bytes"):
        channel.taken(reported("n", b"end=1\tbundle=1"))


def log_bundle_function() -> str:
    """iteration.sh's own `log_bundle`, to run it outside a workspace."""
    found = re.search(r"^log_bundle\(\) \{\n.*?^\}\n", script(), re.S | re.M)
    assert found is not None
    return found.group(0)


@pytest.mark.parametrize(
    ("via", "limit", "printed"),
    [
        ("log-small", "5000", True),
        ("log-small", "4999", False),  # larger than the limit: left in the container
        ("log-small", "", False),
        ("log-small", "1e9", False),
        ("log-small", "$(touch /tmp/pwned)", False),
        ("", "5000", False),
        ("log", "", True),
    ],
)
def test_the_script_prints_a_bundle_only_as_asked(
    tmp_path: Path, via: str, limit: str, printed: bool
) -> None:
    ex = tmp_path / "ex"
    ex.mkdir()
    data = os.urandom(5000)
    (ex / "bundle").write_bytes(data)
    env = {**os.environ, "FKS_EXPORT_VIA": via, "FKS_LOG_BUNDLE_BYTES": limit, "FKS_NONCE": "n"}
    sh = f"ex={ex}\n{log_bundle_function()}log_bundle\n"
    done = subprocess.run(["sh", "-c", sh], env=env, capture_output=True, check=True)
    taken = LoggedBundle("n", tmp_path / "b")
    assert fed(taken, done.stderr, 4096) == b""
    assert (taken.result() is not None) is printed
    if printed:
        assert (tmp_path / "b").read_bytes() == data
    assert not Path("/tmp/pwned").exists()
