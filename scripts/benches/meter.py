"""Benchmark of the egress proxy's meter: per request, a streamed model API response (the
fake Anthropic API's server-sent events) through the proxy with the meter reading its usage,
against the same hop passing it through unread; and against no meter at all (reported)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import uuid
from typing import Any

ROUNDS = 30  # requests per agent container
_TEXT = "word " * 4000  # a 20 kB answer, in the fake's many delta events


def bench_meter(work: object, repeat: int) -> list[str]:
    """The ratios are the median of each container's own (its requests through the proxies
    interleaved, so a drift of the machine's speed during the run cancels out); the times,
    the medians of all containers'."""
    times = _request_latency(repeat)
    read, unread, bare = (statistics.median(t) for t in times)
    ratio = statistics.median(a / b for a, b in zip(times[0], times[1], strict=True))
    bare_ratio = statistics.median(a / b for a, b in zip(times[0], times[2], strict=True))
    metered, plain = _startup(repeat)
    return [
        f"| meter: per request, a streamed 20 kB answer with its usage read by the proxy's meter | {read * 1000:.1f} ms | passed through the meter unread {unread * 1000:.1f} ms | {ratio:.2f}x | <= 1.05x | {'ok' if ratio <= 1.05 else 'MISSED'} |",
        f"| meter: the same, against no meter at all (Squid straight to the API) | {read * 1000:.1f} ms | {bare * 1000:.1f} ms | {bare_ratio:.2f}x | reported | |",
        f"| meter: the egress proxy's start-up, per run of a step with a model API, with the meter | {metered:.2f} s | without it {plain:.2f} s | +{metered - plain:.2f} s ({metered / plain:.1f}x) | reported | |",
    ]


def _startup(repeat: int) -> tuple[float, float]:
    """Medians of the proxy's start (volume to ready) with and without the meter, in turn."""
    import time

    from sandbox_runner.backends.docker.egress.upstream import ApiUpstream
    from sandbox_runner.docker_daemon import docker_client

    client = docker_client()
    apis = [ApiUpstream(url="https://api.anthropic.com", credential=f"bench-{uuid.uuid4().hex}")]
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(repeat + 1):  # the first round warms up
        for meter in (round_ % 2 == 0, round_ % 2 == 1):
            began = time.monotonic()
            with _classes()[0](
                client, run_id=f"bench-start-{uuid.uuid4().hex[:8]}", allow=[], apis=apis,
                meter=meter, ready_timeout=180,
            ):  # fmt: skip
                took = time.monotonic() - began
            if round_:
                times[meter].append(took)
    return statistics.median(times[True]), statistics.median(times[False])


def _request_latency(repeat: int) -> list[list[float]]:
    """Medians of curl's `time_total`: one agent container reaches the three proxies at once
    and sends `ROUNDS` requests to each in turn; per proxy, the medians of `repeat` containers
    (after a warm-up one)."""
    from fks_testing.fakeapi import FakeAnthropic

    from sandbox_runner.backends.docker.egress.upstream import upstreams_for
    from sandbox_runner.docker_daemon import docker_client

    client = docker_client()
    with FakeAnthropic(host="0.0.0.0", responder=_answer, is_side=lambda _: False) as api:
        env = {
            "ANTHROPIC_API_KEY": f"bench-{uuid.uuid4().hex}",
            "ANTHROPIC_BASE_URL": f"http://host.docker.internal:{api.port}",
        }
        apis = upstreams_for(("anthropic",), env)
        proxies = [_proxy(client, apis, meter=True), _unread(client, apis), _proxy(client, apis)]
        times: list[list[float]] = [[], [], []]
        for proxy in proxies:
            proxy.__enter__()
        try:
            for round_ in range(repeat + 1):
                took = _container_medians(client, proxies)
                for n, median in enumerate(took):
                    if round_:
                        times[n].append(median)
        finally:
            for proxy in proxies:
                proxy.__exit__(None, None, None)
    print(f"meter: per request (s): read, unread, bare {times}", file=sys.stderr)
    return times


def _answer(request: Any) -> dict[str, Any]:
    return {"blocks": [{"text": _TEXT}], "usage": {"input_tokens": 10, "output_tokens": 4000}}


def _proxy(client: Any, apis: Any, *, meter: bool = False) -> Any:
    return _classes()[0](
        client,
        run_id=f"bench-meter-{uuid.uuid4().hex[:8]}",
        allow=[],
        apis=apis,
        meter=meter,
        extra_hosts={"host.docker.internal": "host-gateway"},
    )


def _unread(client: Any, apis: Any) -> Any:
    return _classes()[1](
        client,
        run_id=f"bench-meter-{uuid.uuid4().hex[:8]}",
        allow=[],
        apis=apis,
        meter=True,
        extra_hosts={"host.docker.internal": "host-gateway"},
    )


def _classes() -> tuple[type, type]:
    from sandbox_runner.backends.docker.egress.metering import METER_CONFIG
    from sandbox_runner.backends.docker.egress.proxy import EgressProxy

    class Unfollowed(EgressProxy):
        """The proxy, its output not followed: this process (the fake API's too) does no
        work per line, so what is measured is the proxy's."""

        def _follow_in_thread(self) -> None:
            pass

    class Unread(Unfollowed):
        """The meter's hop, its responses passed through unread."""

        def _config_files(self) -> dict[str, str]:
            files = super()._config_files()
            files[METER_CONFIG] = json.dumps({**json.loads(files[METER_CONFIG]), "read": False})
            return files

    return Unfollowed, Unread


def _container_medians(client: Any, proxies: list[Any]) -> list[float]:
    """One container with each proxy's sockets (as a step's container has one's), requests
    to each in turn."""
    from docker.types import Mount

    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE

    body = json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True, "messages": []}
    )
    forwarders = "".join(
        f"socat TCP-LISTEN:{9000 + n},fork,bind=127.0.0.1,reuseaddr UNIX-CONNECT:/p{n}/api.sock & "
        for n in range(len(proxies))
    )
    curls = [
        f"curl -sS -o /dev/null -w '{n} %{{http_code}} %{{time_total}}\\n' "
        f"-H 'content-type: application/json' -d '{body}' http://127.0.0.1:{9000 + n}/v1/messages; "
        for n in range(len(proxies))
    ]
    # Each order and its reverse in turn: no proxy's requests always come first.
    turn = "".join(curls) + "".join(reversed(curls))
    script = f"{forwarders}sleep 1; for i in $(seq {ROUNDS // 2}); do {turn}done"
    mounts = [
        Mount(f"/p{n}", proxy.volume_name, type="volume", read_only=True)
        for n, proxy in enumerate(proxies)
    ]
    out = client.containers.run(
        DEFAULT_AGENT_IMAGE,
        ["sh", "-c", script],
        network_mode="none",
        mounts=mounts,
        user=f"{os.getuid()}:{os.getgid()}",
        remove=True,
    ).decode()
    took: list[list[float]] = [[] for _ in proxies]
    for line in out.splitlines():
        n, status, seconds = line.split()
        if status != "200":
            raise SystemExit(f"bench: a request got {status}")
        took[int(n)].append(float(seconds))
    return [statistics.median(t) for t in took]
