"""The run page and the iteration page of `fks ui`: real runs' steps, iterations, commits and
patches, logs made readable, the raw log as plain text, and everything an agent wrote shown
escaped (never as markup, never with its escape sequences)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from fks_testing.helpers import commit_scripts, fks, git, init_repo
from fks_testing.runlogs import write_run
from starlette.testclient import TestClient

from sandbox_runner.outcomes import Status
from sandbox_runner.web.app import create_app
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

PORT = 48765
SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=1>"
LINK = '<a href="javascript:window.__pwned=1">x</a>'
TITLE = "</title><script>window.__pwned=2</script>"
SVG = "<svg onload=window.__pwned=3>"
STYLE = "</style><style>body{display:none}</style>"
BIDI = "evil\u202egpj.sh"
PAYLOADS = (SCRIPT, IMG, LINK, TITLE, SVG, STYLE)

COLOUR_AGENT = f"""#!/bin/sh
printf '\\033[31mred words\\033[0m plain \\033]0;window title\\007 {BIDI}\\n'
printf '\\033Pdcs\\033[33myellow\\033[0m tail\\n'
printf '%s\\n' '{SCRIPT}' '{IMG}' '{LINK}' '{TITLE}' '{SVG}' '{STYLE}'
echo FORKHESTRA_COMPLETE
"""

ATTACK_AGENT = f"""#!/bin/sh
printf '\\033[32mgreen\\033[0m %s\\n' '{SCRIPT}'
printf 'x\\n' > '{IMG.replace("/", "")}.txt'
printf '%s\\n' '{SVG}' '{STYLE}' > payload.txt
git add -A && git commit -qm '{TITLE} {LINK}'
echo FORKHESTRA_COMPLETE
"""


def client_for(*projects: Path) -> TestClient:
    guard = Guard(token=secrets.token_urlsafe(16), port=PORT, name="fks-test.localhost")
    client = TestClient(create_app(Sources(projects), guard), base_url=guard.origin)
    assert client.get(f"/static/fks.css?token={guard.token}").status_code == 200
    return client


def assert_escaped(html: str, shown: str = "&lt;script&gt;window.__pwned=1&lt;/script&gt;") -> None:
    """No payload is in the page as markup, nor an escape or bidi character; `shown` (a
    payload, escaped) is there as text."""
    for payload in PAYLOADS:
        assert payload not in html, payload
    assert shown in html
    assert "\x1b" not in html and "\u202e" not in html
    assert "<script>" not in html.replace('<script src="/static/live.js" defer></script>', "")


def run_id_of(project: Path) -> str:
    runs = project / ".forge" / "runs"
    return max(
        runs.iterdir(), key=lambda d: json.loads((d / "run.json").read_text())["started"]
    ).name


@pytest.fixture
def local_run(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    project = commit_scripts(init_repo(tmp_path / "proj"), {"colour.sh": COLOUR_AGENT})
    done = fks("run", "./scripts/colour.sh -> ./scripts/colour.sh", cwd=project)
    assert done.code == 0, done.output
    yield project, run_id_of(project)


def test_run_page_shows_steps_and_iterations(local_run: tuple[Path, str]) -> None:
    project, run_id = local_run
    client = client_for(project)
    page = client.get(f"/runs/0/{run_id}")
    assert page.status_code == 200
    html = page.text
    assert f"Run <code>{run_id}</code>" in html
    assert "Step 1: <code>./scripts/colour.sh</code>" in html
    assert "Step 2: <code>./scripts/colour.sh</code>" in html
    assert html.count('class="bar o-complete"') == 2  # one bar per iteration, coloured
    assert f'href="/runs/0/{run_id}/steps/2/iterations/1"' in html
    assert "2 of 2" in html  # steps done
    assert f"fks show {run_id}" in html
    assert f"fks review {run_id} --diff" in html
    assert '<body data-live="">' in html  # finished: nothing to update
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


def test_iteration_page_colours_and_escapes_output(local_run: tuple[Path, str]) -> None:
    project, run_id = local_run
    client = client_for(project)
    page = client.get(f"/runs/0/{run_id}/steps/1/iterations/1")
    assert page.status_code == 200
    html = page.text
    assert '<span class="fg1">red words</span> plain' in html
    assert '<span class="fg3">yellow</span> tail' in html
    assert "window title" not in html
    assert "evil&lt;U+202E&gt;gpj.sh" in html
    assert f"fks logs {run_id} 1 --iteration 1" in html
    assert_escaped(html)


def test_the_commands_shown_do_the_same(local_run: tuple[Path, str]) -> None:
    project, run_id = local_run
    client = client_for(project)
    shown = {
        url: re.findall(r'<code class="terminal">([^<]*)</code>', client.get(url).text)
        for url in (f"/runs/0/{run_id}", f"/runs/0/{run_id}/steps/2/iterations/1")
    }
    commands = [unescape(c) for found in shown.values() for c in found]
    assert f"fks show {run_id}" in commands
    assert f"fks logs {run_id} 2 --iteration 1" in commands
    for command in commands:
        done = fks(*shlex.split(command)[1:], cwd=project)
        assert done.code == 0, (command, done.output)
        if " logs " in f" {command} ":
            assert "red words" in done.stdout
        if command.startswith("fks show"):
            assert f"Run {run_id}" in done.stdout


def test_raw_log_is_plain_text(local_run: tuple[Path, str]) -> None:
    project, run_id = local_run
    raw = client_for(project).get(f"/runs/0/{run_id}/steps/1/iterations/1?raw=1")
    assert raw.status_code == 200
    assert raw.headers["content-type"] == "text/plain; charset=utf-8"
    assert raw.headers["content-disposition"] == "inline"
    assert raw.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in raw.headers["content-security-policy"]
    assert SCRIPT.encode() in raw.content  # the bytes as written
    assert b"\x1b[31mred words" in raw.content
    assert raw.headers["content-length"] == str(len(raw.content))


def test_unknown_run_step_or_iteration_is_one_line_404(local_run: tuple[Path, str]) -> None:
    project, run_id = local_run
    client = client_for(project)
    for url, says in (
        ("/runs/0/20990101-000000-beef", "has no record"),
        ("/runs/7/" + run_id, "no project 7"),
        ("/runs/0/.hidden", "not a run id"),
        (f"/runs/0/{run_id}/steps/9/iterations/1", "has no step 9"),
        (f"/runs/0/{run_id}/steps/1/iterations/5", "has no iteration 5"),
    ):
        page = client.get(url)
        assert page.status_code == 404, url
        assert says in page.text, url
        assert "Traceback" not in page.text


def hostile_branch(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository whose step branch, file names and commit subject carry payloads."""
    project = init_repo(tmp_path / "proj")
    base = git(project, "rev-parse", "main")
    branch = "fks/<script>window.__pwned=1</script>"
    git(project, "switch", "-q", "-c", branch)
    (project / f"{IMG.replace('/', '')}.py").write_text(f"print('{SCRIPT}')\n\x1b[31mred\n")
    (project / "style.css").write_text(f"{STYLE}\n{SVG}\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", f"{TITLE} {LINK} {BIDI}")
    git(project, "switch", "-q", "main")
    return project, branch, base


def test_step_branch_commits_and_patch_escaped(tmp_path: Path) -> None:
    project, branch, base = hostile_branch(tmp_path)
    write_run(project, "20260102-030405-abcd", steps=[2], branches=[branch], base_commit=base)
    page = client_for(project).get("/runs/0/20260102-030405-abcd")
    assert page.status_code == 200
    html = page.text
    assert "<code>fks/&lt;script&gt;window.__pwned=1&lt;/script&gt;</code>" in html
    sha = git(project, "rev-parse", branch)
    assert f"<code>{sha[:12]}</code>" in html
    assert "&lt;/title&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert "evil&lt;U+202E&gt;gpj.sh" in html
    assert "2 files changed, 4 insertions(+)" in html
    # The patch, highlighted in its file's language by class, escaped.
    assert '<span class="add">+<span class="nb">print</span><span class="p">(</span>' in html
    assert "<span class=\"s1\">'&lt;script&gt;window.__pwned=1&lt;/script&gt;'</span>" in html
    assert '<span class="gh">diff --git a/&lt;img src=x onerror=window.__pwned=1&gt;.py' in html
    assert_escaped(html)


def test_running_run_updates_live(tmp_path: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord

    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[2])
    path = project / ".forge" / "runs" / "20260102-030405-abcd" / "run.json"
    record = RunRecord.model_validate_json(path.read_text())
    record.status, record.ended, record.pid = Status.RUNNING, None, os.getpid()
    last = record.steps[0].iterations[-1]
    last.ended, last.reason, last.marker, last.exit_code = None, None, False, None
    write_atomic(path, record.model_dump_json())
    client = client_for(project)
    html = client.get("/runs/0/20260102-030405-abcd").text
    assert '<body data-live="run:0:20260102-030405-abcd">' in html
    assert 'class="bar o-running"' in html
    log = client.get("/runs/0/20260102-030405-abcd/steps/1/iterations/2").text
    assert '<body data-live="run:0:20260102-030405-abcd">' in log
    done = client.get("/runs/0/20260102-030405-abcd/steps/1/iterations/1").text
    assert '<body data-live="">' in done


def test_run_of_a_second_project(tmp_path: Path) -> None:
    first, second = init_repo(tmp_path / "one"), init_repo(tmp_path / "two")
    write_run(second, "20260102-030405-abcd", steps=[1])
    client = client_for(first, second)
    assert client.get("/runs/0/20260102-030405-abcd").status_code == 404
    html = client.get("/runs/1/20260102-030405-abcd").text
    assert f"fks show 20260102-030405-abcd --cwd {second}" in html
    log = client.get("/runs/1/20260102-030405-abcd/steps/1/iterations/1").text
    assert f"fks logs 20260102-030405-abcd 1 --iteration 1 --cwd {second}" in log


def test_claude_step_with_plain_output_keeps_its_colours(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "proj")  # a Claude step whose CLI printed no stream-json
    write_run(project, "20260102-030405-abcd", steps=[1], log_text=b"\x1b[1;32mok\x1b[0m <b>\n")
    html = client_for(project).get("/runs/0/20260102-030405-abcd/steps/1/iterations/1").text
    assert '<span class="fg2 bold">ok</span> &lt;b&gt;' in html
    assert "(a Claude session)" not in html


def test_deleted_branch_and_missing_repository_say_so(tmp_path: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord

    project, branch, base = hostile_branch(tmp_path)
    tip = git(project, "rev-parse", branch)
    write_run(
        project,
        "20260102-030405-abcd",
        steps=[1, 1],
        branches=[branch, "fks/gone"],
        base_commit=base,
    )
    path = project / ".forge" / "runs" / "20260102-030405-abcd" / "run.json"
    record = RunRecord.model_validate_json(path.read_text())
    record.steps[0].head_commit = tip
    record.steps[1].repo = str(tmp_path / "nowhere")
    record.steps[1].conflicts = [f"{IMG}.py"]
    write_atomic(path, record.model_dump_json())
    git(project, "branch", "-D", branch)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert f"the branch no longer exists; its recorded commits up to {tip[:12]}" in html
    assert "&lt;/title&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html  # still shown
    assert f"the repository {tmp_path / 'nowhere'} no longer exists" in html
    assert '<g class="conflict">' in html
    assert (
        "could not merge into main: conflicts in &lt;img src=x onerror=window.__pwned=1&gt;.py"
        in html
    )
    assert_escaped(html)


def test_without_a_start_commit_the_fork_point(tmp_path: Path) -> None:
    project, branch, _ = hostile_branch(tmp_path)
    write_run(project, "20260102-030405-abcd", steps=[1], branches=[branch], base_commit=None)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert "2 files changed, 4 insertions(+)" in html
    assert_escaped(html)


def test_many_commits_are_cut_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox_runner.web import branch as branch_module

    monkeypatch.setattr(branch_module, "MAX_COMMITS", 3)
    project = init_repo(tmp_path / "proj")
    base = git(project, "rev-parse", "main")
    git(project, "switch", "-q", "-c", "fks/many")
    for n in range(5):
        git(project, "commit", "-q", "--allow-empty", "-m", f"commit number {n}")
    write_run(project, "20260102-030405-abcd", steps=[1], branches=["fks/many"], base_commit=base)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert "commit number 4" in html and "commit number 2" in html
    assert "commit number 1" not in html
    assert "… and 2 more commits" in html


def test_patch_lines_that_look_like_headers(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "proj", {"q.sql": "-- old\nselect 1;\n++ x\n"})
    base = git(project, "rev-parse", "main")
    git(project, "switch", "-q", "-c", "fks/sql")
    (project / "q.sql").write_text("select 1;\n+++ y\n")
    git(project, "commit", "-qam", "sql")
    write_run(project, "20260102-030405-abcd", steps=[1], branches=["fks/sql"], base_commit=base)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert '<span class="del">-<span class="c1">-- old</span></span>' in html
    assert '<span class="del">-<span class="o">++</span>' in html
    assert '<span class="add">+<span class="o">+++</span>' in html
    assert '<span class="gh">--- a/q.sql</span>' in html


def test_past_its_budget_a_patch_is_marked_not_lexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_runner.web import patch

    monkeypatch.setattr(patch, "LANGUAGE_BYTES", 10)
    project, branch, base = hostile_branch(tmp_path)
    write_run(project, "20260102-030405-abcd", steps=[1], branches=[branch], base_commit=base)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert (
        '<span class="add">+print(&#39;&lt;script&gt;window.__pwned=1&lt;/script&gt;&#39;)' in html
    )
    assert '<span class="nb">' not in html
    assert_escaped(html)


def test_big_patch_is_cut_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox_runner.web import branch as branch_module

    monkeypatch.setattr(branch_module, "DIFF_BYTES", 2000)
    project = init_repo(tmp_path / "proj")
    base = git(project, "rev-parse", "main")
    git(project, "switch", "-q", "-c", "fks/big")
    (project / "big.txt").write_text("".join(f"line {n}\n" for n in range(5000)))
    git(project, "add", "-A")
    git(project, "commit", "-qm", "big")
    write_run(project, "20260102-030405-abcd", steps=[1], branches=["fks/big"], base_commit=base)
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert "The patch is cut here, after " in html
    assert "line 10" in html and "line 4999" not in html


def test_patches_of_a_page_are_bounded_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_runner.web import branch as branch_module

    monkeypatch.setattr(branch_module, "PAGE_DIFF_BYTES", 3000)
    project = init_repo(tmp_path / "proj")
    base = git(project, "rev-parse", "main")
    for name in ("one", "two"):
        git(project, "switch", "-q", "-c", f"fks/{name}", base)
        (project / f"{name}.txt").write_text("".join(f"{name} {n}\n" for n in range(400)))
        git(project, "add", "-A")
        git(project, "commit", "-qm", name)
    write_run(
        project,
        "20260102-030405-abcd",
        steps=[1, 1],
        branches=["fks/one", "fks/two"],
        base_commit=base,
    )
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert "+one 199" in html
    assert "+one 399" not in html and "+two 0" not in html
    assert "The patch is not shown: the page already shows the patches of the steps before" in html


def test_transcript_shown_as_messages_and_tool_calls(tmp_path: Path) -> None:
    events = [
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "m"},
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": f"I will {SCRIPT} {IMG}"}]},
        },
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": SVG}}
                ]
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "content": f"{STYLE}\x1b]0;t\x07"}]},
        },
    ]
    log = "".join(json.dumps(e) + "\n" for e in events).encode()
    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[1], log_text=log)
    html = client_for(project).get("/runs/0/20260102-030405-abcd/steps/1/iterations/1").text
    assert "(a Claude session)" in html
    assert '<span class="l-agent">I will &lt;script&gt;' in html
    assert '<span class="l-tool">→ Bash' in html
    assert '<span class="l-result">  ← &lt;/style&gt;' in html
    assert_escaped(html)


def test_a_tool_call_opens_to_the_whole_call_escaped_and_bounded(tmp_path: Path) -> None:
    command = f"echo {'a' * 120}\nprintf '%s' '{SCRIPT}' \x1b]0;t\x07{BIDI}"

    def call(tool: str, tool_input: dict[str, object]) -> dict[str, object]:
        block = {"type": "tool_use", "id": "t", "name": tool, "input": tool_input}
        return {"type": "assistant", "message": {"content": [block]}}

    result = {"type": "tool_result", "content": "\n".join(f"{IMG} {n}" for n in range(9))}
    events = [
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "m"},
        call("Bash", {"command": command}),
        call("Write", {"file_path": "big.txt", "content": "w" * 50_000}),
        call("Bash", {"command": "ls"}),
        {"type": "user", "message": {"content": [result]}},
    ]
    log = "".join(json.dumps(e) + "\n" for e in events).encode()
    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[1], log_text=log)
    html = client_for(project).get("/runs/0/20260102-030405-abcd/steps/1/iterations/1").text
    opened = '<details class="whole"><summary><span class="l-tool">→ Bash: echo aaa'
    assert opened in html
    whole = html.split(opened, 1)[1].split("</details>", 1)[0]
    assert f'<span class="l-whole">    echo {"a" * 120}</span>' in whole
    assert "printf &#39;%s&#39; &#39;&lt;script&gt;window.__pwned=1&lt;/script&gt;&#39;" in whole
    assert "&#39; evil&lt;U+202E&gt;gpj.sh</span>" in whole  # no escape; the bidi shown
    assert '<span class="l-tool">→ Bash: ls</span>' in html  # shown whole already: no details
    big = html.split('<span class="l-tool">→ Write: big.txt</span></summary>', 1)[1]
    assert len(big.split("</details>", 1)[0]) < 21_000
    assert "more characters; `fks logs --raw` has them)" in big.split("</details>", 1)[0]
    results = html.split('<span class="l-result">    (the whole result)</span></summary>', 1)[1]
    assert "&lt;img src=x onerror=window.__pwned=1&gt; 8" in results.split("</details>", 1)[0]
    assert_escaped(html)


def test_iteration_denied_hosts_and_requests_escaped(tmp_path: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import RunRecord
    from sandbox_runner.results.reported import DeniedRecord, NetworkRecord, RequestsRecord

    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[1])
    path = project / ".forge" / "runs" / "20260102-030405-abcd" / "run.json"
    record = RunRecord.model_validate_json(path.read_text())
    it = record.steps[0].iterations[0]
    it.denied = [DeniedRecord(host=f"{SCRIPT}.example", port=443, count=3)]
    it.denied_more = 4
    it.network = NetworkRecord(
        requests=[
            RequestsRecord(host=SVG, port=80, method=IMG, status=403, result="TCP_DENIED", count=3),
            RequestsRecord(
                host="api.anthropic.com",
                port=443,
                method="CONNECT",
                status=200,
                result="TCP_TUNNEL",
                secret="model API",
                count=5,
                sent=10,
                received=20,
            ),
        ],
        more=2,
    )
    write_atomic(path, record.model_dump_json())
    client = client_for(project)
    html = client.get("/runs/0/20260102-030405-abcd/steps/1/iterations/1").text
    assert "3 requests to &lt;script&gt;window.__pwned=1&lt;/script&gt;.example:443" in html
    assert "4 more requests to other destinations" in html
    assert "<code>&lt;svg onload=window.__pwned=3&gt;:80</code>" in html
    assert "<td>model API</td>" in html
    assert "and 2 more requests of other kinds" in html
    assert "fks show 20260102-030405-abcd --network" in html
    assert_escaped(html)
    run = client.get("/runs/0/20260102-030405-abcd").text
    assert "denied: 3 requests to &lt;script&gt;window.__pwned=1&lt;/script&gt;.example:443" in run
    assert "10 requests through the egress proxy" in run  # in the bar's tooltip
    assert_escaped(run)


def test_step_of_1000_iterations(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[1000, 3])
    client = client_for(project)
    client.get("/runs/0/20260102-030405-abcd")  # templates compiled
    began = time.perf_counter()
    page = client.get("/runs/0/20260102-030405-abcd")
    took = time.perf_counter() - began
    print(
        f"\nrun page with a step of 1,000 iterations: {took * 1000:.0f} ms, {len(page.content)} bytes"
    )
    assert page.status_code == 200
    assert page.text.count('<rect class="bar ') == 1003
    assert page.text.count('class="bar o-failed"') == 1000 // 7 + 0
    assert "1 request to blocked.example:443" not in page.text  # 2 each
    assert "2 requests to blocked.example:443" in page.text
    middle = client.get("/runs/0/20260102-030405-abcd/steps/1/iterations/500").text
    assert 'rel="prev" href="/runs/0/20260102-030405-abcd/steps/1/iterations/499"' in middle
    assert 'rel="next" href="/runs/0/20260102-030405-abcd/steps/1/iterations/501"' in middle
    last = client.get("/runs/0/20260102-030405-abcd/steps/1/iterations/1000").text
    assert 'rel="next"' not in last


@pytest.mark.docker
def test_sandboxed_run_attacker_branch(tmp_path: Path) -> None:
    project = commit_scripts(
        init_repo(tmp_path / "proj"), {"attack.sh": ATTACK_AGENT, "colour.sh": COLOUR_AGENT}
    )
    done = fks("run", "./scripts/colour.sh -> ./scripts/attack.sh", "--sandbox", cwd=project)
    assert done.code == 0, done.output
    run_id = run_id_of(project)
    client = client_for(project)
    html = client.get(f"/runs/0/{run_id}").text
    assert f"fks/{run_id}/2-attack.sh" in html
    assert 'class="merge"' in html  # the steps merged
    assert "&lt;/title&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert '<span class="add">+' in html
    assert_escaped(html, shown="&lt;img src=x onerror=window.__pwned=1&gt;.txt")
    assert "&lt;svg onload=window.__pwned=3&gt;" in html  # in the patch
    log = client.get(f"/runs/0/{run_id}/steps/2/iterations/1").text
    assert '<span class="fg2">green</span> &lt;script&gt;' in log
    assert_escaped(log)


@pytest.mark.docker
@pytest.mark.claude
def test_claude_transcript_of_a_real_run(tmp_path: Path) -> None:
    from fks_testing.claude import bash, claude_env, run_fks
    from fks_testing.fakeapi import FakeAnthropic
    from fks_testing.helpers import write_config

    from sandbox_runner.plan.prompts import MARKER

    project = init_repo(tmp_path / "proj")
    write_config(project, {"agents": {"worker": {"systemPromptText": "Work.", "maxTurns": 5}}})
    git(project, "add", "forge")
    git(project, "commit", "-qm", "config")
    with FakeAnthropic(host="0.0.0.0") as fake:
        fake.add_conversation(
            [
                [bash(f"printf '%s\\n' '{STYLE}' '{SVG}'", IMG)],
                [{"text": f"Done {SCRIPT} {LINK}\n{MARKER}"}],
            ]
        )
        done = run_fks(
            "run", "worker:1", "--prompt", "Go.", "--sandbox", cwd=project, env=claude_env(fake)
        )
    assert done.code == 0, done.tail()
    run_id = run_id_of(project)
    client = client_for(project)
    html = client.get(f"/runs/0/{run_id}/steps/1/iterations/1").text
    assert "(a Claude session)" in html
    assert '<span class="l-tool">→ Bash' in html
    assert '<span class="l-result">  ← &lt;/style&gt;&lt;style&gt;body{display:none}' in html
    assert '<span class="l-agent">Done &lt;script&gt;window.__pwned=1&lt;/script&gt;' in html
    assert_escaped(html)
    run = client.get(f"/runs/0/{run_id}").text
    assert 'class="bar o-complete"' in run
    assert_escaped(run, shown=f"fks show {run_id}")


def test_a_runs_notifications_are_listed_escaped(tmp_path: Path) -> None:
    from sandbox_runner.paths import write_atomic
    from sandbox_runner.records.record import DeliveryRecord, RunRecord

    project = init_repo(tmp_path / "proj")
    write_run(project, "20260102-030405-abcd", steps=[1])
    path = project / ".forge" / "runs" / "20260102-030405-abcd" / "run.json"
    record = RunRecord.model_validate_json(path.read_text())
    at = record.ended or record.started
    record.deliveries = [
        DeliveryRecord(event="run_end", service="ntfy", target=0, ok=True, time=at),
        DeliveryRecord(
            event="run_end", service="json", target=1, ok=False, time=at, error=SCRIPT + BIDI
        ),
    ]
    write_atomic(path, record.model_dump_json())
    html = client_for(project).get("/runs/0/20260102-030405-abcd").text
    assert "<h2>Notifications</h2>" in html
    assert "<code>notify[0]</code> (ntfy)</td><td>sent</td>" in html
    assert "<code>notify[1]</code> (json)</td><td>not sent: &lt;script&gt;" in html
    assert_escaped(html)
