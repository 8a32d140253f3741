"""The egress proxy's meter (`meter.py`, a mitmproxy addon, driven here with flows of its
shape) and the host's reading of its lines (`metering.py`): usage read from each API's
streamed and whole responses, and an agent that forges a model, hides usage, cuts a stream
short or sends a huge event line cannot spend past the budget."""

from __future__ import annotations

import asyncio
import io
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox_runner.backends.docker.egress import meter as meter_module
from sandbox_runner.backends.docker.egress.meter import EVENT_LIMIT, Meter, Reading
from sandbox_runner.backends.docker.egress.metering import Spends, budget_text, meter_line

ROUTES = {"api.test": ["https", "api.test", 443]}
PRICES = [["sonnet", 3.0, 15.0], ["gpt-5", 1.25, 10.0], ["gemini-2.5-pro", 1.25, 10.0]]


def _flow(path: str, body: dict[str, Any] | bytes, content_type: str, status: int = 200) -> Any:
    request = SimpleNamespace(
        host_header="api.test",
        path=path,
        raw_content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={},
        method="GET" if path.endswith("/models") else "POST",
        scheme="http",
        host="",
        port=0,
    )
    request.content = request.raw_content
    response = SimpleNamespace(
        headers={"content-type": content_type}, stream=None, status_code=status
    )
    return SimpleNamespace(request=request, response=None, metadata={}, _response=response)


class _Run:
    """A meter and its budget file; `call` sends one response through it in `chunks`."""

    def __init__(self, tmp_path: Path, left: float | None = None) -> None:
        self.budget = tmp_path / "budget.json"
        self.budget.write_text(budget_text(1, left))
        self.out = io.StringIO()
        config = {"routes": ROUTES, "prices": PRICES, "cache": [1.25, 0.1]}
        self.meter = Meter(config, str(self.budget), self.out)

    def call(
        self,
        path: str,
        body: dict[str, Any] | bytes,
        chunks: list[bytes],
        sse: bool = True,
        status: int = 200,
        flow: Any = None,
    ) -> Any:
        if flow is None:
            flow = _flow(path, body, "text/event-stream" if sse else "application/json", status)
        self.meter.request(flow)
        if flow.response is not None:  # refused
            return flow
        flow.response = flow._response
        self.meter.responseheaders(flow)
        read = flow.response.stream
        passed = chunks if read is True else [read(chunk) for chunk in [*chunks, b""]]
        assert b"".join(passed) == b"".join(chunks)  # streamed on as it came
        self.meter.response(flow)
        return flow

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line.split(" ", 1)[1]) for line in self.out.getvalue().splitlines()]


def _sse(*events: dict[str, Any]) -> list[bytes]:
    return [f"event: {e.get('type', 'x')}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


ANTHROPIC = _sse(
    {
        "type": "message_start",
        "message": {
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 1000, "output_tokens": 1},
        },
    },
    {"type": "content_block_delta", "delta": {"text": "hi"}},
    {"type": "message_delta", "usage": {"output_tokens": 200}},
)


def test_usage_of_each_api_streamed_and_whole(tmp_path: Path) -> None:
    run = _Run(tmp_path)
    sonnet = {"model": "claude-sonnet-4-5"}
    # An event split across chunks is read whole.
    joined = b"".join(ANTHROPIC)
    run.call("/v1/messages", sonnet, [joined[:50], joined[50:77], joined[77:]])
    completed = {"type": "response.completed", "response": {"model": "gpt-5", "usage": {}}}
    completed["response"]["usage"] = {
        "input_tokens": 2000,
        "input_tokens_details": {"cached_tokens": 1000},
        "output_tokens": 100,
    }
    run.call("/v1/responses", {"model": "gpt-5"}, _sse({"type": "response.created"}, completed))
    gemini = {"usageMetadata": {"promptTokenCount": 400, "candidatesTokenCount": 50}}
    last = {**gemini, "candidates": [{"finishReason": "STOP"}]}
    run.call("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", {}, _sse(gemini, last))
    whole = {"type": "message", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 10}}
    run.call("/v1/messages", sonnet, [json.dumps(whole).encode()], sse=False)
    # Listing models and counting tokens cost nothing, whatever their answer's size.
    run.call("/v1/models", {}, [b"x" * 10_000], sse=False)
    run.call("/v1/messages/count_tokens", {}, [b'{"input_tokens": 9000}'], sse=False)
    costs = [line["cost"] for line in run.lines()]
    assert costs == pytest.approx(
        [
            (1000 * 3 + 200 * 15) / 1e6,
            (1000 * 1.25 + 1000 * 1.25 * 0.1 + 100 * 10) / 1e6,
            (400 * 1.25 + 50 * 10) / 1e6,
            10 * 3 / 1e6,
        ]
    )
    assert all(line["final"] for line in run.lines())


def test_the_request_after_the_budget_is_reached_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _Run(tmp_path, left=0.01)
    made: list[tuple[int, str]] = []

    def make(status: int, text: str, kind: str = "anthropic") -> str:
        made.append((status, text))
        return "x"

    monkeypatch.setattr(meter_module, "_make", make)
    usage = _sse({"type": "message_delta", "usage": {"input_tokens": 2000, "output_tokens": 500}})
    sonnet = {"model": "claude-sonnet-4-5"}
    run.call("/v1/messages", sonnet, usage)  # $0.0135: past the limit, not refused
    assert run.call("/v1/messages", sonnet, usage).response == "x"
    assert made == [(402, "fks egress proxy: budget: spent $0.0135 of $0.0100")]
    assert run.lines()[-1] == {"iteration": 1, "spent": pytest.approx(0.0135), "refused": True}
    # The host opens the next iteration: its spend starts from nothing.
    run.budget.write_text(budget_text(2, 0.01) + " ")
    run.call("/v1/messages", sonnet, usage)
    assert run.lines()[-1]["iteration"] == 2


def test_in_mitmproxy_the_sums_come_after_the_response_yet_before_the_next_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mitmproxy calls `response` before it sends a streamed body's end: the meter's sums and
    line wait for the loop's next turn (the agent has its answer), and still come before the
    loop reads another request."""
    run = _Run(tmp_path, left=0.01)
    monkeypatch.setattr(meter_module, "_make", lambda status, text, kind="anthropic": "x")
    usage = _sse({"type": "message_delta", "usage": {"input_tokens": 2000, "output_tokens": 500}})
    sonnet = {"model": "claude-sonnet-4-5"}

    async def agent() -> list[Any]:
        run.call("/v1/messages", sonnet, usage)
        seen = [run.out.getvalue(), run.meter.spent]
        await asyncio.sleep(0)  # the loop's next turn, where mitmproxy reads the next request
        return [*seen, run.call("/v1/messages", sonnet, usage).response]

    assert asyncio.run(agent()) == ["", 0.0, "x"]
    assert [line.get("refused", False) for line in run.lines()] == [False, True]


def test_a_request_in_the_same_turn_as_a_response_past_the_budget_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection's request hook can run in the same turn of the loop as a response's
    (its body read with the response's last chunk): the deferred sum is made before its
    budget is checked, so the call after the one that crossed the budget is still refused."""
    run = _Run(tmp_path, left=0.01)
    monkeypatch.setattr(meter_module, "_make", lambda status, text, kind="anthropic": "x")
    usage = _sse({"type": "message_delta", "usage": {"input_tokens": 2000, "output_tokens": 500}})
    sonnet = {"model": "claude-sonnet-4-5"}

    async def agent() -> Any:
        run.call("/v1/messages", sonnet, usage)
        return run.call("/v1/messages", sonnet, usage).response

    assert asyncio.run(agent()) == "x"
    assert [line.get("refused", False) for line in run.lines()] == [False, True]
    assert run.lines()[0]["cost"] == pytest.approx(0.0135)


@pytest.mark.parametrize(
    ("model", "chunks", "at_least"),
    [
        # A model name of no family (the agent chooses it) costs the dearest price.
        ("free-model-0", ANTHROPIC, (1000 * 3 + 200 * 15) / 1e6),
        # No usage at all: every byte sent and received counted as a token.
        (
            "claude-sonnet-4-5",
            _sse({"type": "content_block_delta", "delta": {"text": "x" * 999}}),
            1e-3,
        ),
        # Cut short after message_start: its input counts, the rest by size.
        ("claude-sonnet-4-5", ANTHROPIC[:2], 1000 * 3 / 1e6),
        # A huge event line: passed on, counted by its size, never parsed.
        ("claude-sonnet-4-5", [b"data: " + b"x" * (EVENT_LIMIT + 10), b"\n\n"], 15.0),
    ],
)
def test_forged_hidden_or_cut_short_usage_is_never_free(
    tmp_path: Path, model: str, chunks: list[bytes], at_least: float
) -> None:
    run = _Run(tmp_path)
    run.call("/v1/messages", {"model": model}, chunks)
    assert run.lines()[-1]["cost"] >= at_least


def test_the_host_reads_meter_lines_bounded_and_checked() -> None:
    assert meter_line('fks-meter {"iteration": 3, "spent": 1.5, "refused": true}') == (3, 1.5, True)
    # A figure past reason is still past the budget: taken at the most, never dropped.
    assert meter_line('fks-meter {"iteration": 1, "spent": 1e300, "refused": true}') == (
        1,
        1e6,
        True,
    )
    for bad in (
        'fks-meter {"iteration": -1, "spent": 1}',
        'fks-meter {"iteration": 1, "spent": 1e400}',
        'fks-meter {"iteration": 1, "spent": NaN}',
        'fks-meter {"iteration": true, "spent": 1}',
        "fks-meter [1, 2]",
        "fks-meter " + "x" * 5000,
        "1795936193.294 TCP_MISS/200 POST host 1 8080 1 1 -",
    ):
        assert meter_line(bad) is None, bad
    spends, stopped = Spends(), []
    spends.watch(2, lambda: stopped.append(True))
    spends.take_line('fks-meter {"iteration": 1, "spent": 0.5, "refused": true}')
    spends.take_line('fks-meter {"iteration": 2, "spent": 0.7}')
    spends.take_line('fks-meter {"iteration": 2, "spent": 0.2}')  # late, out of order
    assert stopped == [] and spends.of(2).spent == 0.7
    spends.take_line('fks-meter {"iteration": 2, "spent": 0.7, "refused": true}')
    assert stopped == [True] and spends.of(2).refused


def test_reading_keeps_no_more_than_one_event(tmp_path: Path) -> None:
    reading = Reading("anthropic", sse=True)
    for _ in range(50):
        reading.feed(b"x" * (EVENT_LIMIT // 4))
    assert len(reading._pending) <= EVENT_LIMIT
    assert reading.size == 50 * (EVENT_LIMIT // 4)


def test_config_prices_come_before_the_table(tmp_path: Path) -> None:
    from sandbox_runner.backends.docker.egress.metering import METER_CONFIG, meter_files
    from sandbox_runner.backends.docker.egress.upstream import upstreams_for

    apis = upstreams_for(("openai",), {"OPENAI_API_KEY": "k"})
    config = json.loads(meter_files(apis, [("my-model", 1.0, 4.0)])[METER_CONFIG])
    assert config["routes"] == {"api.openai.com": ["https", "api.openai.com", 443]}
    assert config["prices"][0] == ["my-model", 1.0, 4.0]
    meter = Meter(config, str(tmp_path / "none"), io.StringIO())
    assert meter.prices.of("my-model-large") == (1.0, 4.0)
    assert meter.prices.of("gpt-5-mini") == (0.25, 2.0)


@pytest.mark.parametrize("size", [1, 3, 7, 64, 150, 1 << 20])
def test_usage_split_anywhere_across_chunks_is_read(tmp_path: Path, size: int) -> None:
    run = _Run(tmp_path)
    joined = b"".join(ANTHROPIC)
    chunks = [joined[i : i + size] for i in range(0, len(joined), size)]
    run.call("/v1/messages", {"model": "claude-sonnet-4-5"}, chunks)
    assert run.lines()[-1]["cost"] == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    assert run.lines()[-1]["final"] is True


@pytest.mark.parametrize("status", [400, 401, 429, 529])
def test_a_refusal_of_the_api_costs_nothing(tmp_path: Path, status: int) -> None:
    """An API that refuses a call (a wrong key, a bad request, rate limits, overload) generated
    nothing and bills nothing: no cost, though its body has no usage; a 200 without usage
    still costs every byte."""
    run = _Run(tmp_path, left=1.0)
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x" * 5000}]}
    error = [b'{"type": "error", "error": {"type": "authentication_error"}}']
    run.call("/v1/messages", body, error, sse=False, status=status)
    assert run.lines() == [] and run.meter.spent == 0.0
    run.call("/v1/messages", body, error, sse=False)
    assert run.lines()[-1]["cost"] > 0 and run.lines()[-1]["final"] is False


def test_with_a_budget_calls_sent_at_once_go_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call made while another is in flight waits (in mitmproxy's requestheaders hook) until
    that one's response is summed, and is refused if the sum reached the budget: calls sent
    at once spend no more than one turn past it. Without a budget nothing waits."""
    run = _Run(tmp_path, left=0.01)
    usage = _sse({"type": "message_delta", "usage": {"input_tokens": 2000, "output_tokens": 500}})
    sonnet = {"model": "claude-sonnet-4-5"}

    def flow() -> Any:
        return _flow("/v1/messages", sonnet, "text/event-stream")

    async def agent() -> list[Any]:
        first, second, third = flow(), flow(), flow()
        await run.meter.requestheaders(first)
        waiting = [asyncio.ensure_future(run.meter.requestheaders(f)) for f in (second, third)]
        await asyncio.sleep(0.01)
        seen = [w.done() for w in waiting]
        run.call("/v1/messages", sonnet, usage, flow=first)  # $0.0135: past the budget
        await asyncio.sleep(0.01)
        seen += [w.done() for w in waiting]
        refused = run.call("/v1/messages", sonnet, usage, flow=second).response
        await asyncio.sleep(0.01)
        return [*seen, refused, waiting[1].done()]

    made: list[str] = []
    monkeypatch.setattr(
        meter_module, "_make", lambda status, text, kind="anthropic": made.append(text) or "x"
    )
    assert asyncio.run(agent()) == [False, False, True, False, "x", True]
    assert made == ["fks egress proxy: budget: spent $0.0135 of $0.0100"]
    (tmp_path / "free").mkdir()
    free = _Run(tmp_path / "free")

    async def unbudgeted() -> bool:
        await free.meter.requestheaders(flow())
        second = asyncio.ensure_future(free.meter.requestheaders(flow()))
        await asyncio.sleep(0.01)
        return second.done()

    assert asyncio.run(unbudgeted())


def test_a_call_ended_without_a_hook_gives_its_turn_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mitmproxy can end a flow (killed) without the response or error hook that would sum it:
    a call waiting for its turn takes it once that flow is no longer live, not while it is."""
    monkeypatch.setattr(meter_module, "TURN_CHECK_S", 0.02)
    run = _Run(tmp_path, left=1.0)

    def flow() -> Any:
        return _flow("/v1/messages", {"model": "claude-sonnet-4-5"}, "text/event-stream")

    async def agent() -> list[bool]:
        first, second = flow(), flow()
        first.live = True
        await run.meter.requestheaders(first)
        waiting = asyncio.ensure_future(run.meter.requestheaders(second))
        await asyncio.sleep(0.1)  # five checks: the first call still lives
        seen = [waiting.done()]
        first.live = False  # ended, no hook
        await asyncio.sleep(0.1)
        return [*seen, waiting.done(), "fks_turn" in first.metadata, "fks_turn" in second.metadata]

    assert asyncio.run(agent()) == [False, True, False, True]


def test_usage_in_chunks_of_whole_lines_is_read_after_a_huge_line(tmp_path: Path) -> None:
    """A server writing one event at a time sends chunks of whole lines (read without keeping
    any); a line past the limit is not parsed, even where the chunk holding its end looks like
    an event of its own, and the whole lines after it still are."""
    run = _Run(tmp_path)
    forged = b'data: {"type": "message_delta", "usage": {"output_tokens": 999999}}\n\n'
    huge = [b"data: {" + b"x" * EVENT_LIMIT, b"usage" * 10, forged]  # the end of one line
    lines = [line + b"\n" for chunk in ANTHROPIC for line in chunk.split(b"\n")[:-1]]
    run.call("/v1/messages", {"model": "claude-sonnet-4-5"}, [*huge, *lines])
    line = run.lines()[-1]
    assert line["cost"] == pytest.approx((1000 * 3 + 200 * 15) / 1e6), line
    assert line["final"] is True and line["model"] == "claude-sonnet-4-5", line


class _EncodedRequest:
    """A request as mitmproxy has it: `content` is its body decoded by its `Content-Encoding`,
    a ValueError when nothing can decode it; `raw_content` is its body as sent."""

    def __init__(self, body: bytes, encoding: str) -> None:
        self.host_header, self.path, self.method = "api.test", "/v1/messages", "POST"
        self.headers = {"content-encoding": encoding}
        self.raw_content = body
        self.scheme, self.host, self.port = "http", "", 0

    @property
    def content(self) -> bytes:
        raise ValueError(f"Invalid Content-Encoding: {self.headers['content-encoding']}")


@pytest.mark.parametrize("encoding", ["x-fks", "gzip", "utf8"])
def test_a_request_body_the_meter_cannot_decode_is_still_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    """The agent writes the request's headers: a `Content-Encoding` nothing decodes (an API
    that ignores it answers, and bills) still has its response counted, and the call after the
    budget is refused."""
    run = _Run(tmp_path, left=0.005)
    monkeypatch.setattr(meter_module, "_make", lambda status, text, kind="anthropic": "x")
    for _ in range(2):
        flow = _flow("/v1/messages", b"", "text/event-stream")
        flow.request = _EncodedRequest(b'{"model": "claude-sonnet-4-5"}', encoding)
        run.meter.request(flow)
        if flow.response is not None:
            break
        flow.response = flow._response
        run.meter.responseheaders(flow)
        for chunk in [*ANTHROPIC, b""]:
            flow.response.stream(chunk)
        run.meter.response(flow)
    assert flow.response == "x"
    assert run.lines()[0]["cost"] == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    assert run.lines()[-1]["refused"] is True


def _pieces(rng: random.Random) -> bytes:
    """A stream of event lines as a server might write them: usage events (some ending in
    CRLF), lines near and past the limit (some holding the word, some ending in what looks like
    an event), and blank lines."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        usage = {"type": rng.choice(["message_start", "message_delta"]), "usage": {}}
        usage["usage"] = {"input_tokens": rng.randint(1, 99), "output_tokens": rng.randint(1, 99)}
        line = b"data: " + json.dumps(usage, separators=(",", ":")).encode()
        parts.append(
            rng.choice(
                [
                    line + b"\n",
                    line + b"\r\n",
                    b"data: {" + b"y" * rng.randint(40, 120) + rng.choice([b"usage", b""]) + b"\n",
                    b"data: "
                    + b"y" * rng.randint(0, 60)
                    + line
                    + b"\n",  # one line: an event's end
                    b"\n",
                ]
            )
        )
    return b"".join(parts)


def test_usage_read_in_any_chunks_is_what_its_whole_lines_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However the stream is cut (chunks of whole lines read without keeping them, lines open
    across chunks, lines past the limit ending in a chunk of their own), the usage read is the
    one its whole lines within the limit hold, read one by one."""
    monkeypatch.setattr(meter_module, "EVENT_LIMIT", 100)
    rng = random.Random(20261129)
    for _ in range(600):
        stream = _pieces(rng)
        expected = Reading("anthropic", sse=True)
        for line in stream.split(b"\n")[:-1]:
            if len(line) <= 100 and line.startswith(b"data:"):
                expected._take(line[5:])
        cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(0, 8))))
        reading = Reading("anthropic", sse=True)
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            reading.feed(stream[start:end])
        reading.feed(b"")
        assert (reading.tokens, reading.final) == (expected.tokens, expected.final), (stream, cuts)


def test_a_request_or_event_nested_50000_deep_is_still_counted(tmp_path: Path) -> None:
    """The agent writes the request body: JSON nested deeper than the parser goes names no
    model (the response's is taken), and the response's usage is counted all the same; an
    event nested as deep is skipped."""
    run = _Run(tmp_path)
    deep = b'{"model": "claude-sonnet-4-5", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    event = b"data: " + b'{"usage": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n\n"
    run.call("/v1/messages", deep, [*ANTHROPIC, event])
    assert run.lines()[-1]["cost"] == pytest.approx((1000 * 3 + 200 * 15) / 1e6)  # sonnet's
