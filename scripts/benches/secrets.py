"""Benchmarks of secrets by destination: a request through the egress proxy to a local HTTPS
origin with a secret (TLS ended in the proxy, the header added, the origin verified) against
the same request tunnelled untouched; and a sandboxed iteration with a secret configured
against `network: open`."""

from __future__ import annotations

import os
import statistics
import sys
import uuid
from pathlib import Path

from benches.common import ENV, NOOP_CONFIG, fks, make_repo, median_pair

ROUNDS = 40  # requests of each kind per agent container, interleaved


def bench_secrets(work: Path, repeat: int) -> list[str]:
    per_secret, per_tunnel = _request_latency(repeat)
    ratio = per_secret / per_tunnel
    per_s, per_o = _iteration_cost(work, repeat)
    it_ratio = per_s / per_o
    return [
        f"| secrets: per request, curl through the proxy to a local HTTPS origin, TLS ended and secret added | {per_secret * 1000:.1f} ms | tunnelled untouched {per_tunnel * 1000:.1f} ms | {ratio:.2f}x | reported | |",
        f"| secrets: per iteration, `allowlist` with a secret (the run's CA, TLS ending on) | {per_s * 1000:.0f} ms | `open` {per_o * 1000:.0f} ms | {it_ratio:.2f}x | <= 1.10x | {'ok' if it_ratio <= 1.10 else 'MISSED'} |",
    ]


def _request_latency(repeat: int) -> tuple[float, float]:
    """Median `time_total` of curl's requests, `ROUNDS` of each kind in turn in one agent
    container, the medians of `repeat` containers' medians."""
    from fks_testing.origins import HttpsOrigin

    from sandbox_runner.backends.docker.egress.proxy import EgressProxy
    from sandbox_runner.docker_daemon import docker_client
    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE
    from sandbox_runner.plan.allow import AllowEntry
    from sandbox_runner.plan.secrets import SecretEntry, resolve_secrets

    client = docker_client()
    token = f"bench-{uuid.uuid4().hex}"
    with HttpsOrigin(("secret.test", "plain.test"), value=f"Bearer {token}") as origin:
        entry = SecretEntry(host=f"secret.test:{origin.port}", env="BENCH_TOKEN")
        proxy = EgressProxy(
            client,
            run_id=f"bench-secrets-{uuid.uuid4().hex[:8]}",
            allow=[AllowEntry.parse(f"plain.test:{origin.port}")],
            secrets=resolve_secrets([entry], {"BENCH_TOKEN": token}, Path("/")),
            origin_cas=origin.ca_pem.decode(),
            extra_hosts={"secret.test": "host-gateway", "plain.test": "host-gateway"},
        )
        script = (
            f"printf '%s' \"$CA\" > /tmp/origin.pem; for i in $(seq {ROUNDS}); do "
            f"curl -sS -o /dev/null -w 'secret %{{http_code}} %{{time_total}}\\n' "
            f"https://secret.test:{origin.port}/; "
            f"curl -sS --cacert /tmp/origin.pem -o /dev/null "
            f"-H 'Authorization: Bearer {token}' -w 'tunnel %{{http_code}} %{{time_total}}\\n' "
            f"https://plain.test:{origin.port}/; done"
        )
        secret, tunnel = [], []
        with proxy:
            for _ in range(repeat + 1):  # the first container warms the proxy's certificates
                out = client.containers.run(
                    DEFAULT_AGENT_IMAGE,
                    proxy.wrap_argv(["sh", "-c", script]),
                    network_mode="none",
                    mounts=[proxy.mount()],
                    environment={**proxy.env(), "CA": origin.ca_pem.decode()},
                    user=f"{os.getuid()}:{os.getgid()}",
                    remove=True,
                ).decode()
                times = _times(out)
                secret.append(statistics.median(times["secret"]))
                tunnel.append(statistics.median(times["tunnel"]))
    print(f"secrets: per request (s): secret {secret}, tunnel {tunnel}", file=sys.stderr)
    return statistics.median(secret[1:]), statistics.median(tunnel[1:])


def _times(out: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"secret": [], "tunnel": []}
    for line in out.splitlines():
        kind, status, took = line.split()
        if status != "200":
            raise SystemExit(f"bench: a {kind} request got {status}")
        times[kind].append(float(took))
    return times


def _iteration_cost(work: Path, repeat: int) -> tuple[float, float]:
    """Per-iteration cost of `fks run noop:N --sandbox` with a secret configured against
    `open`: runs of 2 and 12 iterations, so fixed costs cancel out."""
    secret = {"host": "api.example.com", "env": "BENCH_SECRET"}
    configs = {
        "secret": {**NOOP_CONFIG, "sandbox": {"secrets": [secret]}},
        "open": {**NOOP_CONFIG, "sandbox": {"network": "open"}},
    }
    projects = {name: make_repo(work / f"secrets-{name}", cfg) for name, cfg in configs.items()}
    os.environ["BENCH_SECRET"] = ENV["BENCH_SECRET"] = f"bench-{uuid.uuid4().hex}"

    def run(name: str, k: int) -> None:
        fks("run", f"noop:{k}", "--sandbox", cwd=projects[name])

    short_s, short_o = median_pair(lambda: run("secret", 2), lambda: run("open", 2), repeat)
    long_s, long_o = median_pair(lambda: run("secret", 12), lambda: run("open", 12), repeat)
    return (long_s - short_s) / 10, (long_o - short_o) / 10
