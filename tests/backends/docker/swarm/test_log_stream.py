"""The log stream of a swarm service (backends/docker/swarm/log_stream.py), against a stand-in for
the engine's API that serves multiplexed frames and honours `since`: what the follow stream
did not bring is caught up once the task has ended, nothing is delivered twice, and a line a
node stamped before the last one it had handed over is not lost."""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox_runner.backends.docker.swarm import log_stream
from sandbox_runner.backends.docker.swarm.log_stream import LogPump

BASE = 1_795_000_000  # seconds since the epoch: any time will do


def frame(stream: int, at_ms: int, data: bytes) -> tuple[int, int, bytes]:
    return stream, BASE * 10**9 + at_ms * 10**6, data


def encode(frames: list[tuple[int, int, bytes]]) -> bytes:
    out = b""
    for stream, at, data in frames:
        stamp = datetime.fromtimestamp(at // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        payload = f"{stamp}.{at % 10**9:09d}Z ".encode() + data
        out += struct.pack(">BxxxL", stream, len(payload)) + payload
    return out


class _Response:
    def __init__(self, data: bytes) -> None:
        self.raw = io.BytesIO(data)

    def close(self) -> None:
        pass


class _Api:
    """The engine: the follow stream brings `followed`; a read that does not follow brings
    every frame of `all_frames` stamped at or after `since`."""

    def __init__(self, followed: list[Any], all_frames: list[Any]) -> None:
        self.followed, self.all = followed, all_frames
        self.sinces: list[int] = []

    def _url(self, template: str, *args: str) -> str:
        return template.format(*args)

    def _get(self, url: str, *, params: dict[str, Any], stream: bool) -> _Response:
        if params["follow"]:
            return _Response(encode(self.followed))
        seconds, _, nanos = params["since"].partition(".")
        since = int(seconds) * 10**9 + int(nanos)
        self.sinces.append(since)
        return _Response(encode(sorted((f for f in self.all if f[1] >= since), key=lambda f: f[1])))

    def _raise_for_status(self, response: _Response) -> None:
        pass


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api


def pumped(api: _Api) -> list[tuple[str, bytes]]:
    pump = LogPump(_Client(api), "service")  # type: ignore[arg-type]
    pump.finish()  # the task has ended: the follow stream's end is not an error
    pump.start()
    got: list[tuple[str, bytes]] = []
    while (item := pump.chunks.get(timeout=10)) is not None:
        assert not isinstance(item, BaseException), item
        got.append(item)
    return got


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_stream, "_LATE_OUTPUT_S", (0.0, 0.0, 0.0))


def test_a_late_line_stamped_before_the_last_one_delivered_is_caught_up_once() -> None:
    early, late_out = frame(1, 0, b"aaaa\n"), frame(1, 100, b"end")
    errs = [frame(2, 50 + n, f"{n}\n".encode()) for n in range(300)]
    followed = [early, *errs]  # `end` (stamped at 100 ms) came only at the container's exit
    got = pumped(_Api(followed, [early, *errs, late_out]))
    out = b"".join(data for stream, data in got if stream == "stdout")
    err = b"".join(data for stream, data in got if stream == "stderr")
    assert out == b"aaaa\nend"
    assert err == b"".join(f"{n}\n".encode() for n in range(300))


def test_identical_lines_at_one_stamp_are_delivered_as_many_times_as_printed() -> None:
    same = [frame(1, 10, b"x\n")] * 3
    got = pumped(_Api(same[:2], same))
    assert got == [("stdout", b"x\n")] * 3


def test_a_catch_up_read_starts_two_seconds_before_the_last_stamp() -> None:
    followed = [frame(1, 0, b"a\n"), frame(1, 5000, b"b\n")]
    api = _Api(followed, followed)
    assert pumped(api) == [("stdout", b"a\n"), ("stdout", b"b\n")]
    assert api.sinces == [(BASE + 3) * 10**9] * 3
