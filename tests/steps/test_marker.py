"""Completion detection and masking on raw chunks, however the output is cut."""

from __future__ import annotations

import json

import pytest

from sandbox_runner.records.masking import MASK, Masker, secrets_from_env
from sandbox_runner.steps.marker import PlainMonitor, StreamJsonMonitor


def feed_all(
    monitor: PlainMonitor | StreamJsonMonitor, data: bytes, size: int, stream: str = "stdout"
) -> None:
    for start in range(0, len(data), size):
        monitor.feed(stream, data[start : start + size])  # type: ignore[arg-type]
    monitor.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 19, 20, 64, 4096])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"working\nFORKHESTRA_COMPLETE\n", True),
        (b"working\n  FORKHESTRA_COMPLETE \t\n", True),
        (b"FORKHESTRA_COMPLETE", True),  # last line without a newline
        (b"working\r\nFORKHESTRA_COMPLETE\r\n", True),
        (b"not FORKHESTRA_COMPLETE yet\n", False),
        (b"FORKHESTRA_COMPLETE!\n", False),
        (b"FORKHESTRA_COMPLET\nE\n", False),
        (b"x" * 70000 + b"FORKHESTRA_COMPLETE\n", False),
        (b"FORKHESTRA_COMPLETE" + b"y" * 70000 + b"\n", False),
        (b"y" * 70000 + b"\nFORKHESTRA_COMPLETE\n", True),
    ],
)
def test_plain_marker_across_any_chunking(text: bytes, expected: bool, size: int) -> None:
    monitor = PlainMonitor()
    feed_all(monitor, text, size)
    assert monitor.marker_seen is expected


def test_plain_marker_ignores_stderr() -> None:
    monitor = PlainMonitor()
    feed_all(monitor, b"FORKHESTRA_COMPLETE\n", 5, stream="stderr")
    assert not monitor.marker_seen


def _assistant(text: str) -> bytes:
    return (
        json.dumps(
            {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}
        ).encode()
        + b"\n"
    )


def _tool_result(text: str) -> bytes:
    event = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}]},
    }
    return json.dumps(event).encode() + b"\n"


@pytest.mark.parametrize("size", [1, 5, 13, 100, 100000])
def test_stream_json_lines_split_across_chunks(size: int) -> None:
    data = (
        _tool_result("FORKHESTRA_COMPLETE")
        + b'{"type":"rate_limit_event"}\n'
        + _assistant("done\nFORKHESTRA_COMPLETE")
    )
    monitor = StreamJsonMonitor()
    feed_all(monitor, data, size)
    assert monitor.marker_seen


@pytest.mark.parametrize("size", [1, 7, 100000])
def test_stream_json_tool_output_never_counts(size: int) -> None:
    monitor = StreamJsonMonitor()
    feed_all(monitor, _tool_result("FORKHESTRA_COMPLETE\n") + _assistant("still working"), size)
    assert not monitor.marker_seen


@pytest.mark.parametrize("size", [1, 2, 5, 8, 33, 1000])
def test_masker_masks_secrets_split_across_chunks(size: int) -> None:
    secret = "sk-ant-api03-SECRETVALUE-1234567890"
    data = f"key={secret}\nagain {secret}{secret} end".encode()
    masker = Masker([secret])
    out = (
        b"".join(masker.feed(data[i : i + size]) for i in range(0, len(data), size))
        + masker.finish()
    )
    assert secret.encode() not in out
    assert out == data.replace(secret.encode(), MASK)


def test_masker_without_secrets_passes_through() -> None:
    masker = Masker([])
    assert masker.feed(b"abc") == b"abc" and masker.finish() == b""


def test_secrets_from_env_takes_credentials_and_named_vars_but_not_short_values() -> None:
    env = {
        "ANTHROPIC_API_KEY": "sk-long-enough",
        "MY_TOKEN": "tok-123456",
        "SHORT": "ab",
        "OTHER": "not-passed",
    }
    assert sorted(secrets_from_env(["MY_TOKEN", "SHORT"], env)) == ["sk-long-enough", "tok-123456"]


def test_a_line_longer_than_the_limit_is_dropped_not_kept() -> None:
    from sandbox_runner.steps.marker import LineBuffer

    buffer = LineBuffer(limit=10)
    assert buffer.feed(b"short\n0123") == [b"short"]
    assert buffer.feed(b"456789abcdef") == []  # over the limit: no longer held
    assert buffer.feed(b"ghij\nok\n") == [b"ok"]
    assert buffer.dropped == 1
    assert buffer.feed(b"x" * 11 + b"\nlast") == []
    assert buffer.dropped == 2
    assert buffer.finish() == [b"last"]
