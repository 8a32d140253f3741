"""What an agent wrote, shown by `fks ui` in Debian's chromium, runs nothing and fetches
nothing: a sandboxed agent's output, commit subject and file names, the branch it worked on and
a forge task's title carry script, event-handler, `javascript:`, CSS and SVG payloads and
terminal escapes; every payload would change the page's title or fetch from a marker server.
And the server answers no one but the user who started it: no token, another Host, another
Origin or a cross-site form post get 403 and change nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
import yaml
from fks_testing.browser import CHROMIUM, MarkerServer, UiServer, Watched, serve
from fks_testing.helpers import fks, git, init_repo
from fks_testing.sandboxed import add_script, configure
from playwright.sync_api import Browser, expect

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.xdist_group("browser-attacks")]

OpenPage = Callable[[UiServer], Watched]
PWNED = "PWNED"


def payloads(marker: str) -> dict[str, str]:
    """Each payload, if rendered as HTML or followed, sets the title to PWNED or fetches from
    the marker server."""
    touch = f"document.title='{PWNED}';fetch('{marker}/js')"
    return {
        "script": f"<script>{touch}</script>",
        "img": f'<img src=x onerror="{touch}">',
        "link": f'<a id=pwn href="javascript:{touch}">{marker}/link</a>',
        "css": f"</style><style>body{{display:none}}</style><link rel=stylesheet href={marker}/css>",
        "svg": f'<svg onload="{touch}"><image href="{marker}/svg"/></svg>',
        "frame": f"<iframe src={marker}/frame></iframe><base href={marker}/base/>",
        "terminal": "\x1b]0;PWNED\x07\x1b[2J\x1b]8;;javascript:alert(1)\x1b\\link\x1b]8;;\x1b\\"
        "\x1b[31mred\x1b[0m \u202egpj.exe",
    }


# File names and branch names cannot hold '/' or spaces: payloads that fit.
FILE_NAME = "<img src=x onerror=document.title='PWNED'>.txt"
BRANCH = "evil<svg_onload=document.title='PWNED'>"


def hostile_agent(marker: str) -> str:
    lines = "\n".join(f"printf '%s\\n' {_sh(p)}" for p in payloads(marker).values())
    subject = _sh(payloads(marker)["script"] + payloads(marker)["img"])
    return (
        "#!/bin/sh\n"
        f"{lines}\n"
        f"echo pwned > {_sh(FILE_NAME)}\n"
        f"echo svg > {_sh('<svg onload=fetch(1)>.md')}\n"
        f"git add -A && git commit -qm {subject}\n"
        "echo FORKHESTRA_COMPLETE\n"
    )


def hostile_task(repo: Path, marker: str, env: dict[str, str]) -> str:
    """A forge task whose title, branch, question and review are payloads (what agents can
    write: task files and the stages' structured answers), waiting for an answer."""
    every = "".join(payloads(marker).values())
    created = fks("forge", "create", every, "--description", every, cwd=repo, env=env)
    assert created.code == 0, created.output
    task = created.stdout.split()[-1]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a hostile task")
    work = repo / ".forge" / "work"
    work.mkdir(parents=True, exist_ok=True)
    item = {
        "task_id": task,
        "title": every,
        "status": "waiting",
        "stage": "analyze",
        "branch": BRANCH,
        "question": f"which one?\n[fks] Landed {every}",
        "feedback": every,
        "review": {"approved": False, "issues": [every], "suggestions": [every]},
    }
    (work / f"{task}-001.yaml").write_text(yaml.safe_dump(item))
    return task


def _sh(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@dataclass(frozen=True)
class Hostile:
    repo: Path
    run_id: str
    env: dict[str, str]
    marker: MarkerServer
    task: str


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """A run of a sandboxed agent that wrote payloads everywhere it can, on a branch whose
    name is one, and the marker server every payload would reach."""
    base = tmp_path_factory.mktemp("hostile")
    env = {"XDG_STATE_HOME": str(base / "state")}
    with MarkerServer() as marker:
        repo = init_repo(base / "repo", {"README.md": "hello\n"})
        add_script(repo, "evil.sh", hostile_agent(marker.url))
        configure(repo, {})
        git(repo, "checkout", "-qb", BRANCH)
        done = fks("run", "./scripts/evil.sh:1", "--sandbox", cwd=repo, env=env, timeout=300)
        assert done.code == 0, done.output
        (run_id,) = [p.name for p in (repo / ".forge" / "runs").iterdir()]
        task = hostile_task(repo, marker.url, env)
        yield Hostile(repo, run_id, env, marker, task)


def assert_harmless(page: Watched, marker: MarkerServer) -> None:
    """No payload ran, rendered as HTML or fetched anything, and the page is whole."""
    tab = page.page
    assert PWNED not in tab.title()
    assert tab.evaluate("() => window.__pwned") is None
    assert tab.locator("body").is_visible()
    for hostile_element in ("img[src=x]", "svg[onload]", "iframe", "base", "a#pwn", "style"):
        assert tab.locator(hostile_element).count() == 0, hostile_element
    assert tab.locator("a[href^='javascript:' i]").count() == 0
    for kind, attribute in (("script", "src"), ("link", "href")):
        found = tab.eval_on_selector_all(kind, f"all => all.map(e => e.{attribute})")
        assert all(url.startswith(page.origin + "/static/") for url in found), (kind, found)
    assert "\x1b" not in tab.content() and "\u202e" not in tab.content()
    assert marker.hits == [], marker.hits
    page.assert_clean()


def test_the_runs_page_shows_a_hostile_run_as_text(hostile: Hostile, open_page: OpenPage) -> None:
    with serve(hostile.repo, env=hostile.env) as server:
        page = open_page(server)
        page.page.get_by_text(hostile.run_id).first.wait_for()
        page.screenshot("runs")
        assert_harmless(page, hostile.marker)
        # A link into fks ui that carries payloads in its query: shown back only as text.
        every = "".join(payloads(hostile.marker.url).values())
        page.goto(f"/?{urlencode({'chain': every})}")
        page.screenshot("query")
        assert_harmless(page, hostile.marker)
        page.goto(f"/?{urlencode({'status': every})}", status=400)  # named in the error
        refused = ("400 ", "Failed to load resource: the server responded with a status of 400")
        page.errors[:] = [e for e in page.errors if not e.startswith(refused)]  # that answer
        page.screenshot("bad-query")
        assert_harmless(page, hostile.marker)


def test_a_hostile_run_its_iteration_log_and_raw_log_run_nothing(
    hostile: Hostile, open_page: OpenPage
) -> None:
    with serve(hostile.repo, env=hostile.env) as server:
        page = open_page(server)
        tab = page.page
        page.goto(f"/runs/0/{hostile.run_id}")
        expect(tab.locator("table.commits")).to_contain_text("<script>")  # the subject, as text
        expect(tab.locator("pre.diff")).to_contain_text(FILE_NAME)
        page.screenshot("run")
        assert_harmless(page, hostile.marker)
        tab.get_by_role("link", name="#1").first.click()
        expect(tab.locator("main")).to_contain_text("onerror=")  # the output, as text
        page.screenshot("iteration")
        assert_harmless(page, hostile.marker)
        with tab.expect_response(lambda r: r.url.endswith("raw") or "raw" in r.url) as raw:
            tab.get_by_role("link", name="raw").first.click()
        assert raw.value.headers["content-type"].startswith("text/plain")
        assert raw.value.headers["x-content-type-options"] == "nosniff"
        expect(tab.locator("body")).to_contain_text("<script>")
        assert PWNED not in tab.title() and tab.locator("img, svg, iframe, a").count() == 0
        assert hostile.marker.hits == [] and page.foreign_requests() == []
        assert page.errors == []


def test_the_forge_board_shows_a_hostile_task_as_text(
    hostile: Hostile, open_page: OpenPage
) -> None:
    with serve(hostile.repo, env=hostile.env) as server:
        page = open_page(server)
        page.page.get_by_role("navigation").get_by_role("link", name="forge").click()
        card = page.page.locator(f"article[id='{hostile.task}']")
        expect(card).to_contain_text("<svg onload=")
        expect(card.locator("textarea[name=answer]")).to_be_visible()
        page.screenshot("forge")
        assert_harmless(page, hostile.marker)


# --- who may talk to fks ui ----------------------------------------------------------------------


def test_a_browser_without_the_token_gets_nothing(hostile: Hostile, open_page: OpenPage) -> None:
    with serve(hostile.repo, env=hostile.env) as server:
        page = open_page(server)
        stranger = page.page.context.browser
        assert stranger is not None
        context = stranger.new_context()
        try:
            tab = context.new_page()
            for path in ("/", f"/?token={server.token[:-1]}x", "/static/fks.css"):
                response = tab.goto(server.origin + path)
                assert response is not None and response.status == 403, path
                assert "open the URL that `fks ui` printed" in tab.content()
                assert hostile.run_id not in tab.content()
        finally:
            context.close()


def test_another_host_or_origin_is_refused(hostile: Hostile) -> None:
    with serve(hostile.repo, env=hostile.env) as server:
        client = server.client()
        assert client.get(f"/?token={server.token}").status_code == 200  # the cookie is set
        assert client.get("/").status_code == 200
        rebinding = client.get("/", headers={"host": f"evil.example:{server.port}"})
        assert rebinding.status_code in (400, 403) and hostile.run_id not in rebinding.text
        foreign = client.get("/", headers={"origin": "http://evil.example"})
        assert foreign.status_code == 403 and hostile.run_id not in foreign.text
        other_port = client.get("/", headers={"origin": f"http://127.0.0.1:{server.port + 1}"})
        assert other_port.status_code == 403
        posted = client.post("/", headers={"sec-fetch-site": "cross-site"}, data={"a": "b"})
        assert posted.status_code == 403


def test_a_cross_site_form_post_is_refused_and_changes_nothing(
    hostile: Hostile, open_page: OpenPage
) -> None:
    """A page on another local port (same site, another origin) that the logged-in user
    visits posts an answer to fks ui as soon as it loads."""
    work = sorted((hostile.repo / ".forge" / "work").iterdir())
    before = {p: p.read_bytes() for p in work}
    with serve(hostile.repo, env=hostile.env) as server:
        target = f"{server.origin}/forge/0/tasks/{hostile.task}/answer"
        attack = (
            f'<form id="f" method="post" action="{target}">'
            '<input name="answer" value="the attacker\'s answer"></form>'
            '<script>document.getElementById("f").submit()</script>'
        )
        with MarkerServer(page=attack) as attacker:
            page = open_page(server)  # the user's browser, with fks ui's cookie
            with page.page.expect_response(target) as posted:
                page.page.goto(f"{attacker.url}/attack")
            assert posted.value.request.method == "POST"
            assert posted.value.status == 403, posted.value.text()
            assert "fks ui: refused" in posted.value.text()
    assert {p: p.read_bytes() for p in work} == before
    assert sorted((hostile.repo / ".forge" / "work").iterdir()) == work


def test_a_rebound_host_name_gets_nothing_even_with_the_token(
    hostile: Hostile, browser: Browser
) -> None:
    """DNS rebinding: a name of the attacker's that now resolves to 127.0.0.1 reaches fks ui's
    port, but the browser says that name as the Host: refused, whatever the URL carries."""
    rebinding = browser.browser_type.launch(
        executable_path=str(CHROMIUM),
        args=["--no-sandbox", "--host-resolver-rules=MAP rebound.test 127.0.0.1"],
    )
    try:
        tab = rebinding.new_page()
        with serve(hostile.repo, env=hostile.env) as server:
            for path in (f"/?token={server.token}", "/", f"/runs/0/{hostile.run_id}", "/forge"):
                response = tab.goto(f"http://rebound.test:{server.port}{path}")
                assert response is not None and response.status in (400, 403), path
                assert hostile.run_id not in tab.content() and hostile.task not in tab.content()
            assert tab.context.cookies() == []
    finally:
        rebinding.close()
