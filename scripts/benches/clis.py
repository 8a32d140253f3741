"""The agent CLIs' start in the agent image: one headless run of each (the command its adapter
builds, answering in one turn against a fake of its API on this machine) in a container of the
image with every CLI, against the same run of Claude Code."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

from benches.common import median_pair

CLIS_IMAGE = os.environ.get("FKS_AGENT_CLIS_IMAGE") or "fks-agent:clis"
HOME = Path("/home/fks/.fks-cli")
DONE = "Done.\nFORKHESTRA_COMPLETE"


@contextlib.contextmanager
def _api(name: str) -> Iterator[dict[str, str]]:
    """A fake of `name`'s API answering every request with the marker; its variables."""
    from fks_testing.fakeapi import FakeAnthropic
    from fks_testing.fakemodels import FakeModelApi

    if name in ("claude", "opencode"):
        with FakeAnthropic(responder=lambda _request: [{"text": DONE}]) as fake:
            yield {"ANTHROPIC_API_KEY": "sk-ant-bench-" + "x" * 20, "ANTHROPIC_BASE_URL": fake.url}
    else:
        with FakeModelApi(
            "openai" if name == "codex" else "gemini", forever=[{"text": DONE}]
        ) as api:
            yield api.env()


def _command(name: str, api: Mapping[str, str], home: Path) -> list[str]:
    """`docker run` of one headless run of `name` in the image (files of its launch in `home`)."""
    from sandbox_runner.agentclis.api import Invocation
    from sandbox_runner.agentclis.registry import agent_cli

    cli = agent_cli(name)
    model = {"codex": "gpt-5", "gemini": "gemini-2.5-pro"}.get(name, "claude-sonnet-4-5")
    call = Invocation(
        program=cli.program,
        prompt="Say that you are done.",
        system_prompt="Print FORKHESTRA_COMPLETE when done.",
        max_turns=5,
        cwd=Path("/workspace"),
        model=model,
        environ=api,
        home=HOME,
    )
    launch = cli.launch(call)
    for relative, text in launch.files.items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    for path in [home, *home.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)  # the image's user writes there too
    env = {**api, **launch.env}
    flags = [f"--env={k}={v}" for k, v in env.items()]
    mounts = [f"--volume={home}:{HOME}", "--tmpfs=/workspace:mode=1777", "--workdir=/workspace"]
    return ["docker", "run", "--rm", "--network=host", *mounts, *flags, CLIS_IMAGE, *launch.argv]


def bench_clis(work: Path, repeat: int) -> list[str]:
    """Each CLI's run against Claude Code's, alternating, `repeat` times after a warm-up."""
    from sandbox_runner.agentclis.registry import agent_cli

    def run(name: str) -> None:
        home = work / f"home-{name}"
        home.mkdir(mode=0o777, exist_ok=True)
        home.chmod(0o777)
        with _api(name) as api:
            done = subprocess.run(
                _command(name, api, home), capture_output=True, text=True, timeout=300, check=False
            )
        parser = agent_cli(name).parser()
        for line in done.stdout.splitlines():
            parser.feed_line(line)
        parser.close()
        if not parser.marker_seen:
            raise RuntimeError(f"{name} did not answer: {done.stdout[-500:]}{done.stderr[-1500:]}")

    rows = []
    for name in ("codex", "gemini", "opencode"):
        other, claude = median_pair(partial(run, name), partial(run, "claude"), repeat, 1)
        rows.append(
            f"| clis: {name} started in the image, one turn against a fake API | {other:.1f} s "
            f"| claude {claude:.1f} s | {other - claude:+.1f} s ({other / claude:.1f}x) | reported | |"
        )
    return rows
