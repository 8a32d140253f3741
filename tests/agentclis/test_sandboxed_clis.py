"""The agent CLIs in the agent image (`fks image build --with codex,gemini,opencode`, built once by
scripts/build-images as FKS_AGENT_CLIS_IMAGE, default fks-agent:clis) and the real OpenCode
under `fks run --sandbox`, its Anthropic API reached through the egress proxy (the fake on the
host, as `host.docker.internal`): completion on the marker with its commit landed, and a
refused key."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest
from fks_testing.agentclis import (
    DONE_TEXT,
    SHELL_COMMIT,
    assert_transcript,
    cli_project,
    last_iteration,
)
from fks_testing.claude import containers
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.fakemodels import API_KEY, Dialect, FakeModelApi
from fks_testing.helpers import fks, git

from sandbox_runner.images.versions import AGENT_CLI_PACKAGES

pytestmark = [pytest.mark.docker, pytest.mark.agentcli]
MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-api03-sandboxedOpenCode" + "x" * 20


@pytest.fixture(scope="module")
def clis_image() -> str:
    """The agent image with every agent CLI; fails (never skips) when it was not built."""
    name = os.environ.get("FKS_AGENT_CLIS_IMAGE") or "fks-agent:clis"
    found = subprocess.run(["docker", "image", "inspect", name], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.fail(
            f"image {name} is missing; scripts/build-images builds it (fks image build --with "
            "codex,gemini,opencode --tag fks-agent:clis)",
            pytrace=False,
        )
    return name


@pytest.fixture
def repo(tmp_path: Path, clis_image: str) -> Iterator[Path]:
    path = cli_project(tmp_path / "repo", "opencode", model=MODEL, maxTurns=8)
    yield path
    leftovers = containers(f"fks.repo={path}")
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


def test_the_image_holds_each_cli_pinned_and_says_so(clis_image: str) -> None:
    script = "codex --version && gemini --version && opencode --version"
    hardened = ["--network", "none", "--read-only", "--tmpfs", "/tmp", "-u", "4242:4242"]
    home = ["--tmpfs", "/home/fks:mode=1777"]
    ran = subprocess.run(
        ["docker", "run", "--rm", *hardened, *home, clis_image, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    for package in AGENT_CLI_PACKAGES.values():
        assert package.rsplit("@", 1)[1] in ran.stdout, (package, ran.stdout)
    labels = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "-f",
            '{{index .Config.Labels "fks.agent-clis"}}',
            clis_image,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert labels.stdout.strip() == "codex,gemini,opencode"


def _env(fake: FakeAnthropic) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": f"http://host.docker.internal:{fake.port}",
        "ANTHROPIC_API_KEY": KEY,
    }


def _sandboxed(repo: Path, image: str, fake: FakeAnthropic, dsl: str) -> tuple[int, str]:
    env = _env(fake)
    done = fks(
        "run", dsl, "--prompt", "Add f.txt and commit it.", "--sandbox", "--image", image,
        cwd=repo, env=env, timeout=300,
    )  # fmt: skip
    return done.code, done.output


@pytest.mark.timeout(420)
def test_an_opencode_step_in_the_sandbox_completes_on_the_marker_and_lands(
    repo: Path, clis_image: str
) -> None:
    script = [[[{"text": "Working."}, {"tool": "bash", "input": {"command": SHELL_COMMIT}}]]]
    script[0].append([{"text": DONE_TEXT}])
    with FakeAnthropic({"conversations": script}, host="0.0.0.0") as api:
        code, output = _sandboxed(repo, clis_image, api, "worker:2")
        first = api.main_requests()[0]
    assert code == 0, output[-3000:]
    assert "agent: add f" in git(repo, "log", "--format=%s", "main")
    it = last_iteration(repo)
    assert it["reason"] == "marker", it
    assert it["claude"]["input_tokens"], it
    # OpenCode finds its plugin package installed (the image's): no npm registry request for
    # the proxy to refuse, and no host the user is told to allow.
    assert it["denied"] == [], it["denied"]
    assert "denied" not in output, output[-3000:]
    assert first.body["model"] == MODEL
    assert "FORKHESTRA_COMPLETE" in str(first.body), "fks's instructions reach the model"
    assert KEY not in output
    assert_transcript(repo, _env(api), "OpenCode", command="echo hi")  # as for a local run


@pytest.mark.timeout(420)
def test_a_refused_key_ends_a_sandboxed_opencode_step_as_auth_error(
    repo: Path, clis_image: str
) -> None:
    with FakeAnthropic({"conversations": [[{"error": 401}]]}, host="0.0.0.0") as api:
        code, output = _sandboxed(repo, clis_image, api, "worker:3")
    assert code == 1, output[-3000:]
    assert last_iteration(repo)["reason"] == "auth_error", output[-3000:]


def test_a_step_whose_cli_its_image_lacks_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    from sandbox_runner.images.lookup import DEFAULT_AGENT_IMAGE, build_command

    repo = cli_project(tmp_path / "repo", "codex", model="gpt-5")
    env = {"OPENAI_API_KEY": "sk-fake-" + "x" * 20}
    done = fks("run", "worker", "--prompt", "Go.", "--sandbox", cwd=repo, env=env, timeout=120)
    assert done.code == 2, done.output
    assert done.stderr == (
        f"fks: step 'worker' runs Codex, which image {DEFAULT_AGENT_IMAGE} does not hold; put it "
        f"in with '{build_command(DEFAULT_AGENT_IMAGE)} --with codex'\n"
    )
    assert not (repo / ".forge" / "runs").exists()


def _other(tmp_path: Path, kind: str, model: str, **agent: object) -> Path:
    return cli_project(tmp_path / "repo", kind, model=model, **agent)


@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("kind", "dialect", "model", "title", "command"),
    [
        ("codex", "openai", "gpt-5-mini", "Codex", "/bin/bash -lc"),
        ("gemini", "gemini", "gemini-2.5-flash", "Gemini CLI", "echo hi"),
    ],
)
def test_codex_and_gemini_in_the_sandbox_complete_on_the_marker_and_land(
    tmp_path: Path,
    clis_image: str,
    kind: str,
    dialect: Dialect,
    model: str,
    title: str,
    command: str,
) -> None:
    """Their APIs reached through the egress proxy (its own port for each, the key put on by
    it: the container holds a placeholder), the marker, the commit landed, the proxy's cost."""
    repo = _other(tmp_path, kind, model, maxTurns=8)
    script = [[{"text": "Working."}, {"shell": SHELL_COMMIT}], [{"text": DONE_TEXT}]]
    with FakeModelApi(dialect, script, host="0.0.0.0") as api:
        env = api.env(host="host.docker.internal")
        done = fks(
            "run", "worker:2", "--prompt", "Add f.txt and commit it.", "--sandbox",
            "--image", clis_image, cwd=repo, env=env, timeout=300,
        )  # fmt: skip
        keys = [body for _path, body in api.requests]
    assert done.code == 0, done.output[-3000:]
    assert "agent: add f" in git(repo, "log", "--format=%s", "main")
    it = last_iteration(repo)
    assert it["reason"] == "marker", it
    assert it["claude"]["cost_usd"] and it["claude"]["cost_usd"] > 0, it
    assert keys and API_KEY not in done.output
    assert_transcript(repo, env, title, command=command)


OTHERS = [("codex", "openai", "gpt-5"), ("gemini", "gemini", "gemini-2.5-flash")]


def _run(repo: Path, image: str, env: dict[str, str], dsl: str, *args: str) -> tuple[int, str]:
    done = fks(
        "run", dsl, "--prompt", "Go on.", "--sandbox", "--image", image, *args,
        cwd=repo, env=env, timeout=300,
    )  # fmt: skip
    return done.code, done.output


@contextmanager
def _looping(kind: str, dialect: str) -> Iterator[tuple[dict[str, str], Callable[[], int]]]:
    """A model that calls its shell tool at every turn, for `kind`: the container's
    environment for it, and the count of its main requests so far."""
    if kind == "opencode":
        always = [[{"tool": "bash", "input": {"command": "echo again", "description": "run"}}]]
        with FakeAnthropic({"conversations": [always * 200]}, host="0.0.0.0") as api:
            yield _env(api), lambda: len(api.main_requests())
        return
    looping = FakeModelApi(
        cast(Dialect, dialect), forever=[{"shell": "echo again"}], host="0.0.0.0"
    )
    with looping as other:
        yield other.env(host="host.docker.internal"), lambda: other.main_count


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("kind", "dialect", "model"), [*OTHERS, ("opencode", "", MODEL)])
def test_a_step_past_its_budget_is_stopped_at_the_proxy(
    tmp_path: Path, clis_image: str, kind: str, dialect: str, model: str
) -> None:
    """A model that keeps calling tools: the proxy refuses the call past --max-cost, and the
    iteration ends with reason budget, naming the limit."""
    repo = _other(tmp_path, kind, model, maxTurns=200)
    with _looping(kind, dialect) as (env, calls):
        code, output = _run(repo, clis_image, env, "worker:1", "--max-cost", "0.0005")
        made = calls()
    assert code == 1, output[-3000:]
    assert last_iteration(repo)["reason"] == "budget", output[-3000:]
    assert "--max-cost" in output, output[-3000:]
    assert 1 <= made < 50, made


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("kind", "dialect", "model"), [*OTHERS, ("opencode", "", MODEL)])
def test_a_sandboxed_step_stops_at_the_agents_max_turns(
    tmp_path: Path, clis_image: str, kind: str, dialect: str, model: str
) -> None:
    """Gemini CLI's own limit, or fks's count of the turns in Codex's and OpenCode's stream."""
    repo = _other(tmp_path, kind, model, maxTurns=2)
    with _looping(kind, dialect) as (env, calls):
        code, output = _run(repo, clis_image, env, "worker:1")
        made = calls()
    assert code == 1, output[-3000:]
    assert last_iteration(repo)["reason"] == "max_turns", output[-3000:]
    assert made <= 4, made


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("kind", "dialect", "model"), OTHERS)
def test_a_refused_key_ends_a_sandboxed_codex_or_gemini_step_as_auth_error(
    tmp_path: Path, clis_image: str, kind: str, dialect: Dialect, model: str
) -> None:
    repo = _other(tmp_path, kind, model, maxTurns=8)
    with FakeModelApi(dialect, [{"error": 401}], host="0.0.0.0") as api:
        code, output = _run(repo, clis_image, api.env(host="host.docker.internal"), "worker:3")
    assert code == 1, output[-3000:]
    assert last_iteration(repo)["reason"] == "auth_error", output[-3000:]
