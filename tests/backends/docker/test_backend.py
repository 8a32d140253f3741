"""`fks run --sandbox` against the real Docker engine: containers, workspaces, merge-back, safety."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fks_testing.helpers import FKS, eventually_none, fks, git, init_repo
from fks_testing.sandboxed import (
    COMMIT_AGENT,
    add_script,
    branches,
    configure,
    containers,
    interrupt_once_logged,
    of_repo,
    record,
    run_with_user_commit,
    sandbox,
    volumes,
    waiting_agent,
)

pytestmark = pytest.mark.docker


def test_loop_commits_land_on_base_and_branch_is_kept(repo: Path) -> None:
    res = sandbox("./scripts/commit.sh:3")
    assert res.code == 0, res.output
    assert "[fks] Iteration 2/3" in res.stdout and "Iteration 3/3" not in res.stdout
    assert "[fks] Complete after 2 iterations" in res.stdout
    log = git(repo, "log", "--format=%s", "main")
    assert log.splitlines()[:2] == ["agent: work 2", "agent: work 1"]
    assert (repo / "work-1.txt").read_text() == "work 1\n"  # the user's checkout shows the result
    rec = record(repo)
    step = rec["steps"][0]
    assert step["branch"] in branches(repo)
    assert step["merged"] is True and step["merge_commit"] == git(repo, "rev-parse", "main")
    assert git(repo, "rev-parse", step["branch"]) == git(repo, "rev-parse", "main")  # fast-forward
    eventually_none(lambda: volumes(rec["id"]), "the workspace")  # it went with the run
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main work tree
    assert containers(rec["id"]) == []
    assert all(it["container_id"] for it in step["iterations"])
    assert git(repo, "status", "--porcelain") == ""  # .forge/ is kept out of git


def test_two_steps_second_sees_first(repo: Path) -> None:
    add_script(
        repo,
        "check.sh",
        "#!/bin/sh\ncat work-1.txt && ls work-*.txt | wc -l > count.txt && git add count.txt && git commit -qm counted\n",
    )
    res = sandbox("./scripts/commit.sh:2 -> ./scripts/check.sh", env={"MARK_AT": "1"})
    assert res.code == 0, res.output
    assert "work 1" in res.stdout
    assert (repo / "count.txt").read_text().strip() == "1"
    assert git(repo, "log", "-1", "--format=%s", "main") == "counted"
    rec = record(repo)
    assert [s["merged"] for s in rec["steps"]] == [True, True]
    assert rec["steps"][1]["branch"].endswith("/2-check.sh")


def test_incomplete_step_not_merged_exit_1(repo: Path) -> None:
    before = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/commit.sh:2", env={"MARK_AT": "9"})
    assert res.code == 1, res.output
    assert git(repo, "rev-parse", "main") == before
    rec = record(repo)
    step = rec["steps"][0]
    assert step["merged"] is False and step["reason"] == "max_iterations"
    assert git(repo, "log", "--format=%s", f"main..{step['branch']}").splitlines() == [
        "agent: work 2",
        "agent: work 1",
    ]
    assert f"Branch kept for review: {step['branch']}" in res.stdout
    assert f"log --stat main..{step['branch']}" in res.stdout
    eventually_none(lambda: volumes(rec["id"]), "the workspace")  # removed, branch kept
    assert containers(rec["id"]) == []


def test_a_step_that_made_no_commits_says_so_instead_of_asking_for_a_review(repo: Path) -> None:
    add_script(repo, "idle.sh", "#!/bin/sh\necho thinking\n")
    res = sandbox("./scripts/idle.sh:1")
    assert res.code == 1, res.output
    branch = record(repo)["steps"][0]["branch"]
    assert f"No commits on {branch}: the step made none, nothing to review" in res.stdout
    assert "Branch kept for review" not in res.stdout and "log --stat" not in res.stdout


def test_uncommitted_leftovers_are_committed(repo: Path) -> None:
    add_script(
        repo,
        "messy.sh",
        "#!/bin/sh\necho draft > notes.txt\nmkdir -p src && echo code > src/new.py\necho FORKHESTRA_COMPLETE\n",
    )
    res = sandbox("./scripts/messy.sh:2")
    assert res.code == 0, res.output
    assert "left uncommitted" in res.stdout
    subject = git(repo, "log", "-1", "--format=%s", "main")
    assert subject.startswith("fks: commit what ./scripts/messy.sh left uncommitted")
    assert set(git(repo, "show", "--name-only", "--format=", "main").split()) == {
        "notes.txt",
        "src/new.py",
    }
    assert (repo / "src" / "new.py").read_text() == "code\n"


SAME_SECOND = """#!/bin/sh
# At the start of a second: commit a file, then change it (same size) within that second, and
# end in the next one. git tells the change only by the index's own time (racily clean). A
# busy machine may let the second pass before the change: then again, with another commit.
index=$(git rev-parse --git-path index)
start=$(date +%s)
for draft in 1 3 4 5 6 7 8 9; do
  while [ "$(date +%s)" = "$start" ]; do :; done
  sleep 0.05  # file times follow a coarser clock
  echo "draft $draft" > draft.txt && git add draft.txt && git commit -qm "draft $draft"
  echo "draft 2" > draft.txt
  start=$(date +%s)
  [ "$(stat -c %Y "$index")" = "$(stat -c %Y draft.txt)" ] && break
done
[ "$(stat -c %Y "$index")" != "$(stat -c %Y draft.txt)" ] && echo "WINDOW MISSED"
sleep 1.1
echo FORKHESTRA_COMPLETE
"""


def test_work_changed_in_the_second_of_its_commit_is_not_lost(repo: Path) -> None:
    """A tracked file changed, to the same size, in the second its commit wrote the index, and
    left uncommitted: kept (git's racy-clean check needs the index's own time)."""
    add_script(repo, "same-second.sh", SAME_SECOND)
    res = sandbox("./scripts/same-second.sh:1")
    assert res.code == 0 and "WINDOW MISSED" not in res.stdout, res.output
    assert git(repo, "show", "main:draft.txt") == "draft 2"
    assert "left uncommitted" in git(repo, "log", "-1", "--format=%s", "main")


def test_merge_conflict_leaves_base_untouched(repo: Path, tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    add_script(
        repo,
        "conflict.sh",
        waiting_agent(flags, "echo agent > README.md\ngit commit -qam 'agent edits README'"),
    )
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    code, out, err, user_tip = run_with_user_commit(
        repo, flags, "./scripts/conflict.sh:2", {"README.md": "user\n"}
    )
    assert code == 1, out + err
    assert git(repo, "rev-parse", "main") == user_tip  # base untouched
    assert (repo / "README.md").read_text() == "user\n"
    assert git(repo, "status", "--porcelain") == ""
    step = record(repo)["steps"][0]
    assert step["reason"] == "merge_conflict" and step["conflicts"] == ["README.md"]
    assert step["branch"] in out and "README.md" in out
    assert f"[fks] Not merged: {step['branch']} conflicts with 'main' in README.md" in out, out
    assert git(repo, "log", "-1", "--format=%s", step["branch"]) == "agent edits README"


def test_merge_commit_builds_on_user_commits(repo: Path, tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    add_script(
        repo,
        "slow.sh",
        waiting_agent(flags, "echo a > agent.txt\ngit add agent.txt && git commit -qm agent"),
    )
    code, out, err, user_tip = run_with_user_commit(
        repo, flags, "./scripts/slow.sh:2", {"user.txt": "mine\n"}
    )
    assert code == 0, out + err
    parents = git(repo, "log", "-1", "--format=%P", "main").split()
    assert len(parents) == 2 and parents[0] == user_tip  # never undone, built upon
    assert (repo / "user.txt").exists() and (repo / "agent.txt").exists()
    assert "merge commit" in out


def test_untracked_file_blocks_merge_back_with_clear_message(repo: Path) -> None:
    add_script(
        repo,
        "creates.sh",
        "#!/bin/sh\necho agent > new.txt\ngit add new.txt && git commit -qm 'agent new.txt'\necho FORKHESTRA_COMPLETE\n",
    )
    (repo / "new.txt").write_text("user's untracked work\n")
    before = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/creates.sh:2")
    assert res.code == 1, res.output
    assert (repo / "new.txt").read_text() == "user's untracked work\n"
    assert git(repo, "rev-parse", "main") == before
    assert "new.txt" in res.stdout and "untracked" in res.stdout
    assert "untracked file new.txt; commit, stash or move it, then" in res.stdout, res.output
    assert "[fks] Not merged: could not update 'main'" in res.stdout, res.output
    assert "Warning" not in res.stdout  # the step did not complete: not a warning
    assert "did not complete: did not complete" not in res.stdout, res.output
    assert "Step 1 (./scripts/creates.sh) did not complete after 1 iteration" in res.stdout
    step = record(repo)["steps"][0]
    assert step["reason"] == "merge_blocked" and step["branch"] in branches(repo)


def test_dirty_tracked_files_refuse_to_start(repo: Path) -> None:
    (repo / "README.md").write_text("local edit\n")
    res = sandbox("./scripts/commit.sh:2")
    assert res.code == 2
    assert "uncommitted changes to tracked files" in res.stderr and "README.md" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert (repo / "README.md").read_text() == "local edit\n"
    assert not (repo / ".forge" / "runs").exists()


def test_ref_tampering_agent_cannot_move_other_refs(repo: Path) -> None:
    git(repo, "tag", "v1")
    main_before, tag_before = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "v1")
    add_script(
        repo,
        "tamper.sh",
        "#!/bin/sh\necho x > x.txt && git add x.txt && git commit -qm 'own work'\n"
        "git update-ref refs/heads/main HEAD 2>&1\n"
        "git branch -f main HEAD 2>&1\n"
        "git tag -d v1 2>&1\n"
        "git tag -f v1 HEAD 2>&1\n"
        "git update-ref -d refs/heads/main 2>&1\n"
        "git branch evil HEAD 2>&1\n"
        "git reset -q --hard HEAD~1 && git reset -q --hard HEAD@{1} 2>/dev/null; true\n",
    )
    main_before = git(repo, "rev-parse", "main")
    res = sandbox("./scripts/tamper.sh:1")
    assert res.code == 1, res.output  # no marker: not merged
    # In its own workspace the agent may move any ref; none of it reaches the user's repository.
    assert git(repo, "rev-parse", "main") == main_before
    assert git(repo, "rev-parse", "v1") == tag_before
    step = record(repo)["steps"][0]
    assert sorted(branches(repo)) == sorted(["main", step["branch"]])
    assert git(repo, "log", "-1", "--format=%s", step["branch"]) in ("own work", "add tamper.sh")


def test_timeout_kills_iteration(repo: Path) -> None:
    add_script(repo, "sleepy.sh", "#!/bin/sh\necho started\nsleep 300\necho FORKHESTRA_COMPLETE\n")
    configure(repo, {"sandbox": {"timeout": 2}})
    started = time.monotonic()
    res = sandbox("./scripts/sleepy.sh:1")
    assert res.code == 1, res.output
    assert time.monotonic() - started < 150  # the 2 s timeout, not the agent's 300 s
    assert "timed out after 2s" in res.stdout
    rec = record(repo)
    assert rec["steps"][0]["iterations"][0]["reason"] == "timeout"
    assert containers(rec["id"]) == []


def test_ctrl_c_mid_iteration(repo: Path) -> None:
    add_script(
        repo,
        "long.sh",
        "#!/bin/sh\necho working > partial.txt\ngit add partial.txt && git commit -qm partial\necho waiting\nsleep 120\n",
    )
    code, out, err, took = interrupt_once_logged(repo, "./scripts/long.sh:3", "waiting")
    assert code == 130, out + err
    assert took < 60  # not the agent's 120 s
    rec = record(repo)
    assert containers(rec["id"]) == []
    step = rec["steps"][0]
    assert step["status"] == "interrupted" and rec["status"] == "interrupted"
    assert volumes(rec["id"]) == [step["workspace"]]  # the workspace is kept for --resume
    assert f"Docker volume {step['workspace']}" in err
    # the commit the agent made before the interrupt is on its branch
    assert git(repo, "log", "-1", "--format=%s", step["branch"]) == "partial"
    assert "fks run --resume" in err
    res = fks("clean", cwd=repo)  # the run is dead now: its workspace goes
    assert res.code == 0 and volumes(rec["id"]) == [], res.output
    assert git(repo, "log", "-1", "--format=%s", step["branch"]) == "partial"


def test_long_output_lines(repo: Path) -> None:
    add_script(
        repo,
        "loud.py",
        "#!/usr/bin/env python3\nimport sys\nsys.stdout.write('A' * 50000 + '\\n')\nsys.stdout.write('B' * 100000)\nsys.stdout.flush()\n"
        "sys.stdout.write('\\nFORKHESTRA_COMPLETE\\n')\n",
    )
    res = sandbox("./scripts/loud.py:2")
    assert res.code == 0, res.output[-2000:]
    rec = record(repo)
    log = (
        repo / ".forge" / "runs" / rec["id"] / rec["steps"][0]["iterations"][0]["log"]
    ).read_text()
    assert log == "A" * 50000 + "\n" + "B" * 100000 + "\nFORKHESTRA_COMPLETE\n"
    assert ("A" * 50000 + "\n") in res.stdout


def test_marker_in_long_line_does_not_count(repo: Path) -> None:
    add_script(
        repo,
        "sneaky.py",
        "#!/usr/bin/env python3\nprint('x' * 40000 + 'FORKHESTRA_COMPLETE')\nprint('FORKHESTRA_COMPLETE' + 'y' * 30000)\n",
    )
    res = sandbox("./scripts/sneaky.py:1")
    assert res.code == 1, res.output[-2000:]


@pytest.fixture
def other_user_repo() -> Iterator[tuple[Path, int]]:
    """A repository owned by an unprivileged uid, in a directory that uid can reach."""
    uid = 4242
    top = Path(tempfile.mkdtemp(prefix="fks-owner-"))
    top.chmod(0o755)
    try:
        repo = init_repo(top / "repo", {"README.md": "hi\n"})
        add_script(repo, "commit.sh", COMMIT_AGENT)
        (top / "home").mkdir()
        subprocess.run(["chown", "-R", f"{uid}:{uid}", str(top)], check=True)
        yield repo, uid
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_files_stay_owned_by_the_user(other_user_repo: tuple[Path, int]) -> None:
    repo, uid = other_user_repo
    docker_gid = Path("/var/run/docker.sock").stat().st_gid
    exe = FKS
    env = {"PATH": os.environ["PATH"], "HOME": str(repo.parent / "home"), "MARK_AT": "1"}
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            f"--groups={docker_gid}",
            exe,
            "run",
            "./scripts/commit.sh:2",
            "--sandbox",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"iteration 1 as {uid}:{uid}" in done.stdout
    objects = [p for p in (repo / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects and {p.stat().st_uid for p in objects} == {uid}
    assert (repo / "work-1.txt").stat().st_uid == uid


def test_docker_problems_are_one_line(repo: Path) -> None:
    res = sandbox("./scripts/commit.sh:2", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert res.code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert "Docker" in res.stderr
    res = fks("run", "./scripts/commit.sh:2", "--sandbox", "--image", "fks-missing:nope")
    assert res.code == 2
    assert "fks image build" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_missing_network_is_refused_up_front(repo: Path) -> None:
    configure(repo, {"sandbox": {"network": "docker:fks-no-such-network"}})
    for res in (sandbox("./scripts/commit.sh:2"), fks("validate", cwd=repo)):
        assert res.code == 2, res.output
        assert len(res.stderr.strip().splitlines()) == 1
        assert (
            "sandbox.network: the Docker engine has no network 'fks-no-such-network'; use "
            "allowlist (the default: only allowed hosts, through fks's egress proxy), open or none"
        ) in res.stderr
        assert "without the egress proxy" in res.stderr
    assert not (repo / ".forge" / "runs").exists()


@pytest.mark.parametrize("spelling", ["docker:", ""])
def test_a_docker_network_of_the_users_is_used_as_it_is(repo: Path, spelling: str) -> None:
    name = f"fks-test-net-{os.getpid()}-{len(spelling)}"
    subprocess.run(["docker", "network", "create", name], check=True, capture_output=True)
    try:
        configure(repo, {"sandbox": {"network": f"{spelling}{name}"}})
        assert fks("validate", cwd=repo).code == 0
        dry = sandbox("./scripts/commit.sh:1", "--dry-run")
        assert f"Docker network {name}, as it is (no egress proxy)" in dry.stdout, dry.output
        res = sandbox("./scripts/commit.sh:1", env={"MARK_AT": "1"})
        assert res.code == 0, res.output
        assert (repo / "work-1.txt").exists()
    finally:
        subprocess.run(["docker", "network", "rm", name], check=False, capture_output=True)


def _held_by_a_run(repo: Path, argv: list[str]) -> subprocess.Popen[str]:
    """`fks ARGV` started in `repo`, once it holds its lock (its run record exists)."""
    proc = subprocess.Popen([FKS, *argv], cwd=repo, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((repo / ".forge" / "runs").glob("*/run.json")):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("first", ["local", "sandboxed"])
def test_a_local_run_and_a_sandboxed_one_on_one_base_exclude_each_other(
    repo: Path, tmp_path: Path, first: str
) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    configure(repo, {"sandbox": {"mounts": [str(flags)]}})
    add_script(repo, "wait.sh", waiting_agent(flags, "echo waiting"))
    sandboxed = ["--sandbox"] if first == "sandboxed" else []
    proc = _held_by_a_run(repo, ["run", "./scripts/wait.sh:1", *sandboxed])
    try:
        run_id = record(repo)["id"]
        second = ["run", "./scripts/commit.sh:1", *([] if sandboxed else ["--sandbox"])]
        res = fks(*second, env={"MARK_AT": "1"})
        assert res.code == 2, res.output
        assert res.stderr.startswith(
            f"fks: run {run_id} (pid {proc.pid}) is already running on base branch 'main'; "
        )
        assert len(res.stderr.strip().splitlines()) == 1
        (flags / "go").touch()
        assert proc.wait(timeout=180) == 0
    finally:
        (flags / "go").touch()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert [r["id"] for r in map(json.loads, _run_files(repo))] == [run_id]


def _run_files(repo: Path) -> list[str]:
    return [p.read_text() for p in (repo / ".forge" / "runs").glob("*/run.json")]


def test_dry_run_shows_the_command_as_the_container_runs_it(repo: Path) -> None:
    res = sandbox("./scripts/commit.sh:2", "--dry-run")
    assert res.code == 0, res.output
    lines = [line.strip() for line in res.stdout.splitlines()]
    assert "command: /workspace/scripts/commit.sh" in lines
    assert "cwd:     /workspace (in the container)" in lines
    assert str(repo) not in res.stdout
    local = fks("run", "./scripts/commit.sh:2", "--dry-run")
    assert f"command: {repo}/scripts/commit.sh" in local.stdout  # without --sandbox: the host's


def test_agent_name_resolves_in_image_and_missing_one_is_clear(repo: Path) -> None:
    res = sandbox("forge-tasks")  # installed in the agent image, not necessarily on the host
    assert res.code == 0, res.output
    res = sandbox("no-such-agent-in-image:2")
    assert res.code == 2
    assert "not found in the image" in res.stderr
    assert of_repo("ps", repo) == []  # other sessions may have containers of their own


def test_host_path_outside_repo_is_refused(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\necho hi\n")
    outside.chmod(0o755)
    res = sandbox(f"{outside}:1")
    assert res.code == 2
    assert str(outside) in res.stderr and "mounts" in res.stderr


def test_not_a_git_repo(tmp_path: Path) -> None:
    res = fks("run", "fake:1", "--sandbox", "--cwd", str(tmp_path))
    assert res.code == 2
    assert "needs a git repository" in res.stderr


def test_ctrl_c_reaches_the_agent_in_its_container_as_sigint(repo: Path) -> None:
    add_script(
        repo,
        "polite.sh",
        "#!/bin/sh\n"
        "trap 'echo bye > bye.txt; git add bye.txt; git commit -qm \"wrapped up\"; exit 3' INT\n"
        "echo waiting\nwhile :; do sleep 0.05; done\n",
    )
    code, out, err, _took = interrupt_once_logged(repo, "./scripts/polite.sh:2", "waiting")
    assert code == 130, out + err
    step = record(repo)["steps"][0]
    assert git(repo, "log", "-1", "--format=%s", step["branch"]) == "wrapped up"
    fks("clean", cwd=repo)


def test_next_step_sees_what_the_previous_left_uncommitted(repo: Path) -> None:
    """Step 1 leaves files uncommitted (committed and merged for it); step 2's recycled
    workspace holds exactly the merged tree, whichever way it was switched."""
    add_script(
        repo,
        "messy.sh",
        "#!/bin/sh\necho draft > notes.txt\necho changed >> README.md\nmkdir -p junk && echo x > junk/y\n"
        "echo FORKHESTRA_COMPLETE\n",
    )
    add_script(
        repo,
        "look.sh",
        "#!/bin/sh\ncat notes.txt README.md\ngit status --porcelain | sed 's/^/status: /'\n",
    )
    res = sandbox("./scripts/messy.sh:1 -> ./scripts/look.sh")
    assert res.code == 0, res.output
    assert "draft" in res.stdout and "changed" in res.stdout
    assert "status: " not in res.stdout  # step 2 starts clean, on the merged base


PHASE = re.compile(
    r"\[fks\]   (workspace|proxy|container|checkout|export|import|merge): [0-9]+\.[0-9]{1,2}s"
)


def test_verbose_shows_each_phase_of_the_sandbox_with_its_time(repo: Path) -> None:
    """`-v` says where the time between the step's network line and its merge goes: the
    workspace, the egress proxy, each iteration's container, checkout, export and import,
    then the merge, each with its time, as fks's own lines; without -v none of them."""
    res = sandbox("./scripts/commit.sh:3", "-v")
    assert res.code == 0, res.output
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[fks]   network: "))
    merged = next(i for i, line in enumerate(lines) if line.startswith("[fks] Merged "))
    phases = [m.group(1) for line in lines[start:merged] if (m := PHASE.match(line))]
    iteration = ["container", "checkout", "export", "import"]
    assert phases == ["proxy", "workspace", *iteration, *iteration, "merge"], res.stdout
    # The second iteration's checkout (its line may come after the agent's first words: the
    # container's stdout and stderr reach fks as two streams).
    second = lines[lines.index("[fks] Iteration 2/3") : merged]
    checkouts = [line for line in second if line.startswith("[fks]   checkout: ")]
    assert len(checkouts) == 1, res.stdout
    assert checkouts[0].endswith("(kept as the last iteration left it)"), res.stdout
    assert "(Docker volume fks-ws-" in res.stdout
    quiet = sandbox("./scripts/commit.sh:3")
    assert quiet.code == 0, quiet.output
    assert not any(PHASE.match(line) for line in quiet.stdout.splitlines()), quiet.stdout
