"""Warm containers against the real engine: the next iterations' containers are started while
one runs (never more than the step has iterations), exactly one container runs each iteration,
and none is left behind - after success, failure, Ctrl-C, and kill -9 followed by `fks clean`."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import docker
import pytest
from fks_testing.helpers import FKS, agent_lines, fks
from fks_testing.sandboxed import (
    add_script,
    configure,
    interrupt_once_logged,
    of_repo,
    record,
    sandbox,
)

from sandbox_runner.backends.docker.runners.warm import DEPTH, ROLE_NETNS

pytestmark = pytest.mark.docker

KILLED = 137  # what `docker rm -f` of a container that still waits for its command leaves


class RepoEvents:
    """The container events of `repo`, from the engine's live stream while the block runs
    (`docker events --since` reads a bounded history of the engine's events, which the other
    tests running on it overflow). A container made for the purpose and seen on the stream
    shows that the stream is live and, at the end, that it has delivered everything before it
    (events arrive in order)."""

    MARK_ROLE = "events-mark"

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.events: list[dict[str, Any]] = []
        self._client = docker.from_env(timeout=120)
        self._seen = threading.Condition()
        self._stream: Any = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> RepoEvents:
        filters = {"type": "container", "label": f"fks.repo={self.repo}"}
        self._stream = self._client.events(decode=True, filters=filters)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 120
        while not self._mark(wait_s=1.0):  # made before the stream was subscribed: again
            assert time.monotonic() < deadline, "the event stream never showed its mark"
        return self

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the stream closed under it
            for event in self._stream:
                with self._seen:
                    self.events.append(event)
                    self._seen.notify_all()

    def _mark(self, wait_s: float) -> bool:
        labels = {"fks.repo": str(self.repo), "fks.role": self.MARK_ROLE}
        mark = self._client.containers.create("fks-agent:latest", "true", labels=labels)
        try:
            with self._seen:
                return self._seen.wait_for(
                    lambda: any(e.get("id") == mark.id for e in self.events), timeout=wait_s
                )
        finally:
            mark.remove(force=True)

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                assert self._mark(wait_s=120), "the event stream stopped before the run's end"
        finally:
            self._stream.close()
            if self._reader is not None:
                self._reader.join(timeout=30)
            self._client.close()


class WarmGates:
    """Holds iteration N of a step of `most` iterations at its start until the file `go-N`
    exists in `flags` (mounted into the containers), which it opens once the iteration runs
    and, with `warm`, the container of the next one runs next to it: warm containers are
    made while one runs, and a busy machine must not let a quick iteration end before that."""

    def __init__(self, repo: Path, flags: Path, most: int, *, warm: bool = True) -> None:
        self.repo, self.flags, self.most, self.warm = repo, flags, most, warm
        flags.mkdir(exist_ok=True)
        self._stop = threading.Event()
        self._opener = threading.Thread(target=self._open, daemon=True)

    def agent(self, script: str) -> str:
        """`script` (a `#!/bin/sh` one) held at its start."""
        gate = (
            # The count in the workspace's git dir (the mount is read-only; no file to commit).
            "count=$(git rev-parse --git-path fks-test-count)\n"
            'n=$(($(cat "$count" 2>/dev/null || echo 0) + 1)); echo $n > "$count"\n'
            f"while [ ! -e {self.flags}/go-$n ]; do sleep 0.05; done\n"
        )
        return script.replace("#!/bin/sh\n", "#!/bin/sh\n" + gate, 1)

    def _running_agents(self) -> int:
        listed = subprocess.run(
            [
                *("docker", "ps", "--filter", f"label=fks.repo={self.repo}"),
                *("--filter", "label=fks.step", "--format", '{{.Label "fks.role"}}'),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        return len([role for role in listed if role != ROLE_NETNS])

    def _open(self) -> None:
        for n in range(1, self.most + 1):
            while not self._stop.is_set():
                started = any(self.repo.glob(f".forge/runs/*/01-*/{n:03d}.log"))
                if started and (not self.warm or n == self.most or self._running_agents() >= 2):
                    break
                time.sleep(0.1)
            (self.flags / f"go-{n}").touch()

    def __enter__(self) -> WarmGates:
        self._opener.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._opener.join(timeout=30)


def container_events(recorded: RepoEvents, role: str | None = None) -> dict[str, dict[str, Any]]:
    """Per agent container of the repository (egress proxies and network namespace holders
    left out; `role`: those of that role only): the time of each event (create, start, die,
    destroy, in ns) and its exit code."""
    seen: dict[str, dict[str, Any]] = {}
    for event in recorded.events:
        attrs = event["Actor"]["Attributes"]
        if attrs.get("fks.role") != role:
            continue
        entry = seen.setdefault(event["id"], {"run": attrs.get("fks.run")})
        action = event.get("Action") or event.get("status")
        entry.setdefault(action, event["timeNano"])
        if action == "die":
            entry["exit"] = int(attrs.get("exitCode", -1))
    return seen


def iteration_containers(repo: Path) -> list[str]:
    return [it["container_id"] for it in record(repo)["steps"][0]["iterations"]]


def check_one_container_per_iteration(
    repo: Path, recorded: RepoEvents, warm: bool, most: int
) -> None:
    """Each iteration ran in a container of its own, which ran nothing else; with warm ones,
    DEPTH more were made (never sent a command), or fewer when the step of `most` iterations
    had fewer left; every one of them is gone."""
    ids = iteration_containers(repo)
    events = container_events(recorded)
    assert len(set(ids)) == len(ids) and set(ids) <= set(events), (ids, events)
    ran = {cid for cid, e in events.items() if e.get("exit") != KILLED}
    assert ran == set(ids), events
    extra = set(events) - set(ids)
    assert len(extra) == (min(DEPTH, most - len(ids)) if warm else 0), events
    for cid in extra:
        assert "start" in events[cid] and events[cid]["exit"] == KILLED, events[cid]
    for earlier, later in itertools.pairwise(ids):
        started_before = events[later]["create"] < events[earlier]["die"]
        assert started_before == warm, "the next container is made while one runs (warm only)"
    assert all("destroy" in e for e in events.values()), events
    assert {e["run"] for e in events.values()} == {record(repo)["id"]}
    holders = container_events(recorded, ROLE_NETNS)
    assert len(holders) == (1 if warm else 0), holders  # the step's network namespace
    assert all("destroy" in e for e in holders.values()), holders
    assert of_repo("ps", repo) == []


@pytest.mark.parametrize("warm", [True, False])
def test_exactly_one_container_per_iteration(repo: Path, warm: bool, tmp_path: Path) -> None:
    gates = WarmGates(repo, tmp_path / "flags", most=5, warm=warm)
    add_script(repo, "gated.sh", gates.agent((repo / "scripts" / "commit.sh").read_text()))
    configure(repo, {"sandbox": {"warm": warm, "mounts": [str(gates.flags)]}})
    with RepoEvents(repo) as recorded, gates:
        res = sandbox("./scripts/gated.sh:5", env={"MARK_AT": "3"})
    assert res.code == 0, res.output
    assert [f"iteration {n} as" in res.stdout for n in (1, 2, 3)] == [True] * 3
    check_one_container_per_iteration(repo, recorded, warm, most=5)


def test_nothing_left_after_failing_iterations(repo: Path, tmp_path: Path) -> None:
    gates = WarmGates(repo, tmp_path / "flags", most=3)
    add_script(repo, "fail.sh", gates.agent("#!/bin/sh\necho trying\nexit 3\n"))
    configure(repo, {"noProgressLimit": 0, "sandbox": {"mounts": [str(gates.flags)]}})
    with RepoEvents(repo) as recorded, gates:
        res = sandbox("./scripts/fail.sh:3")
    assert res.code == 1, res.output
    assert res.stdout.count("trying") == 3
    assert [it["exit_code"] for it in record(repo)["steps"][0]["iterations"]] == [3, 3, 3]
    check_one_container_per_iteration(repo, recorded, warm=True, most=3)


def test_command_env_and_prompt_arrive_verbatim_and_prompt_is_read_each_iteration(
    repo: Path, tmp_path: Path
) -> None:
    """What is sent to a waiting container is shell text: quotes, `$(…)`, newlines and
    backslashes in the prompt and the environment must arrive as they were, not run."""
    add_script(
        repo,
        "args.sh",
        "#!/bin/sh\n"
        'printf "arg<%s>\\n" "$@"\n'
        'echo "env $(printf %s "$ODD_VALUE" | sha256sum | cut -c1-64)"\n'
        "[ -e /tmp/pwned ] && echo PWNED\n"
        "n=$(cat /workspace/n 2>/dev/null || echo 0); echo $((n+1)) > /workspace/n\n"
        '[ "$n" -ge 1 ] && echo FORKHESTRA_COMPLETE\n'
        '[ "$n" -eq 0 ] && while [ ! -e /tmp/go ]; do sleep 0.05; done\n'  # the test's gate
        "exit 0\n",
    )
    configure(repo, {"sandbox": {"env": ["ODD_VALUE"]}})
    odd = 'it\'s "$(touch /tmp/pwned)" `touch /tmp/pwned` \\n $HOME\nline two; exit 9'
    secret = 's3cr\'et"$(touch /tmp/pwned)"\\\n\t$PATH'  # masked in the output: hashed
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("first " + odd)
    proc = subprocess.Popen(
        [FKS, "run", "./scripts/args.sh:3", "--sandbox", "--prompt-file", str(prompt)],
        cwd=repo,
        env={**os.environ, "ODD_VALUE": secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    runs = repo / ".forge" / "runs"
    while not any("arg<first" in p.read_text() for p in runs.glob("*/01-*/001.log")):
        assert time.monotonic() < deadline and proc.poll() is None, "iteration 1 never began"
        time.sleep(0.05)
    prompt.write_text("second " + odd)  # the next iteration's container is waiting already
    opened = [
        subprocess.run(["docker", "exec", cid, "touch", "/tmp/go"], capture_output=True).returncode
        for cid in of_repo("ps", repo)  # the running one among them: iteration 1 may end
    ]
    assert 0 in opened, "no container of the run to let iteration 1 end"
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    said = "\n".join(agent_lines(out))  # each line of the agent's carries fks's prefix
    assert f"arg<first {odd}>" in said and f"arg<second {odd}>" in said, out
    assert out.count(f"env {hashlib.sha256(secret.encode()).hexdigest()}") == 2, out
    assert "PWNED" not in out
    assert of_repo("ps", repo) == []


def test_ctrl_c_removes_the_running_and_the_warm_containers(repo: Path) -> None:
    add_script(repo, "long.sh", "#!/bin/sh\necho waiting\nsleep 120\n")
    with RepoEvents(repo) as recorded:
        code, out, err, took = interrupt_once_logged(repo, "./scripts/long.sh:3", "waiting")
    assert code == 130, out + err
    assert took < 60  # not the agent's 120 s
    assert of_repo("ps", repo) == []  # before any `fks clean`
    events = container_events(recorded)
    (ran,) = iteration_containers(repo)
    warm = [cid for cid in events if cid != ran and "start" in events[cid]]
    # the first iteration's containers, the warm ones, and the export of what was interrupted
    assert len(warm) == DEPTH + 1 and all("destroy" in e for e in events.values()), events
    fks("clean", cwd=repo)


def test_kill_9_then_clean_removes_the_warm_containers(repo: Path) -> None:
    add_script(repo, "long.sh", "#!/bin/sh\necho waiting\nsleep 300\n")
    configure(repo, {"sandbox": {"timeout": 120}})
    proc = subprocess.Popen(
        [FKS, "run", "./scripts/long.sh:3", "--sandbox"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        runs = repo / ".forge" / "runs"
        while True:
            logged = any("waiting" in p.read_text() for p in runs.glob("*/01-*/001.log"))
            agents = subprocess.run(
                [
                    "docker",
                    "ps",
                    "--filter",
                    f"label=fks.repo={repo}",
                    "--filter",
                    "label=fks.step",
                    "--format",
                    '{{.ID}} {{.Label "fks.role"}}',
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            agents = [line for line in agents if not line.endswith(ROLE_NETNS)]
            if logged and len(agents) == 1 + DEPTH:  # the iteration's and the warm ones
                break
            assert time.monotonic() < deadline, "no warm container next to the running one"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(of_repo("ps", repo)) >= 2 + DEPTH  # nobody removed them, nor the holder
    res = fks("clean", cwd=repo)
    assert res.code == 0, res.output
    assert of_repo("ps", repo) == [] and of_repo("volume", repo) == [], res.output


def test_warm_setting_is_validated(repo: Path) -> None:
    configure(repo, {"sandbox": {"warm": "no"}})
    res = fks("validate")
    assert res.code == 2, res.output
    assert "sandbox.warm" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_nothing_of_an_iteration_lives_on_in_the_shared_network_namespace(repo: Path) -> None:
    """The iterations of a step share a network namespace: a listener an iteration leaves
    behind (in a session of its own, output closed) is gone when the next one begins."""
    listener = (
        "import socket, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 47123)); s.listen()\n"
        "open('/tmp/listening', 'w').close()\n"
        "while True: s.accept()[0].sendall(b'LEFT-BEHIND'); time.sleep(0.01)\n"
    )
    probe = (
        "import socket\n"
        "try: print(socket.create_connection(('127.0.0.1', 47123), 2).recv(64).decode())\n"
        "except OSError as exc: print('REFUSED', type(exc).__name__)\n"
    )
    add_script(
        repo,
        "leave.sh",
        "#!/bin/sh\n"
        'if [ -e started ]; then python3 -c "$PROBE"; echo FORKHESTRA_COMPLETE; exit 0; fi\n'
        "touch started\n"
        'setsid python3 -c "$LISTENER" </dev/null >/dev/null 2>&1 &\n'
        "while [ ! -e /tmp/listening ]; do sleep 0.05; done\n"
        'python3 -c "$PROBE"\n',
    )
    configure(repo, {"sandbox": {"env": ["LISTENER", "PROBE"]}})
    res = fks(
        "run",
        "./scripts/leave.sh:3",
        "--sandbox",
        cwd=repo,
        env={**os.environ, "LISTENER": listener, "PROBE": probe},
    )
    assert res.code == 0, res.output
    assert res.stdout.count("LEFT-BEHIND") == 1, res.stdout  # iteration 1 reached its own
    assert "REFUSED ConnectionRefusedError" in res.stdout, res.stdout
    assert of_repo("ps", repo) == []
