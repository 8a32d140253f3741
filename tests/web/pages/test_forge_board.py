"""The forge page of `fks ui` as a browser sees it: the board by stage, answering a clarification
from the page (what `fks forge answer` does), and what agents wrote shown, never obeyed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fks_testing.forge import ANALYSIS, APPROVED, answer, commit, context, new_task
from fks_testing.helpers import fks, init_repo
from starlette.testclient import TestClient

from sandbox_runner.commands.forge_task import ANSWER_LIMIT
from sandbox_runner.forge.models import ReviewResult
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.records.record import PullRecord
from sandbox_runner.web.app import create_app
from sandbox_runner.web.security import Guard
from sandbox_runner.web.sources import Sources

PORT = 48213
TOKEN = "forge-page-token-0123456789"
NAME = "fks-test.localhost"
ORIGIN = f"http://{NAME}:{PORT}"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = init_repo(tmp_path / "repo", {"README.md": "hello\n", "a.txt": "zero\n"})
    monkeypatch.chdir(path)
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(key, "Test User")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "test@example.com")
    return path


def client_for(*projects: Path, token: bool = True) -> TestClient:
    app = create_app(Sources(projects), Guard(token=TOKEN, port=PORT, name=NAME))
    client = TestClient(app, base_url=ORIGIN)
    if token:
        assert client.get(f"/?token={TOKEN}").status_code == 200
    return client


@pytest.fixture
def client(repo: Path) -> Iterator[TestClient]:
    with client_for(repo) as client:
        yield client


def item(repo: Path, task_id: str, **fields: Any) -> WorkItem:
    work = WorkItem(task_id=task_id, **fields)
    WorkStore(repo).write(work)
    return work


def waiting(repo: Path, task_id: str, question: str, **fields: Any) -> None:
    """A task whose Architect asked a human, as the pipeline leaves it."""
    WorkStore(repo).ask(WorkItem(task_id=task_id, stage="architect", **fields), question)


def columns(page: str) -> dict[str, str]:
    """Each column of the board: its key and its HTML."""
    parts = page.split('<section class="column column-')[1:]
    return {part.split('"', 1)[0]: part.split("</section>", 1)[0] for part in parts}


def post_answer(
    client: TestClient, task_id: str, text: str, *, project: int = 0, **headers: str
) -> Any:
    return client.post(
        f"/forge/{project}/tasks/{task_id}/answer",
        data={"answer": text},
        headers={"Origin": ORIGIN, **headers},
        follow_redirects=False,
    )


def test_the_board_shows_each_task_in_its_stage(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = {name: new_task(repo, f"the {name} one", capsys) for name in (
        "todo", "analyzing", "implementing", "review", "waiting", "in_pr", "landed", "failed"
    )}  # fmt: skip
    item(repo, tasks["analyzing"], status="interrupted", stage="analyze")
    rejected = ReviewResult(approved=False, issues=["a.txt must say 'two'"], suggestions=["x"])
    item(repo, tasks["implementing"], status="pending", stage="implement", attempts=2,
         retries=1, cost_usd=0.25, review=rejected, feedback="The reviewer rejected it")  # fmt: skip
    item(repo, tasks["review"], status="pending", stage="review", attempts=1, cost_usd=0.125)
    waiting(repo, tasks["waiting"], "Red or blue?", cost_usd=0.5)
    item(repo, tasks["landed"], status="completed", stage="done", attempts=1, cost_usd=1.5,
         review=ReviewResult.model_validate(APPROVED), question="Tabs?", answer="Spaces.")  # fmt: skip
    pull = PullRecord(repo="acme/widgets", head="fks/forge/x", base="main", number=3,
                      url="https://github.com/acme/widgets/pull/3", state="draft")  # fmt: skip
    item(repo, tasks["in_pr"], status="completed", stage="done", pr=pull)
    item(
        repo, tasks["failed"], status="failed", stage="implement", error="Implement made no commit"
    )

    page = client.get("/forge")
    assert page.status_code == 200, page.text
    board = columns(page.text)
    assert list(board) == [
        "todo", "analyzing", "implementing", "review", "waiting", "in_pr", "landed", "failed"
    ]  # fmt: skip
    assert 'href="https://github.com/acme/widgets/pull/3"' in board["in_pr"]
    for column, task_id in tasks.items():
        assert task_id in board[column], column
        assert f"the {column} one" in board[column]
        others = [c for c in board if c != column]
        assert not any(task_id in board[c] for c in others), column
    assert "2 attempts" in board["implementing"] and "$0.2500" in board["implementing"]
    assert "a.txt must say &#39;two&#39;" in board["implementing"]
    assert "$1.50" in board["landed"] and "Review: approved" in board["landed"]
    assert '<span class="status">landed</span>' in board["landed"], board["landed"]
    assert "Tabs?" in board["landed"] and "Spaces." in board["landed"]  # the question, answered
    assert "at done" not in page.text and "waiting for an answer" in board["waiting"]
    assert "Implement made no commit" in board["failed"]
    assert "Red or blue?" in board["waiting"] and "<textarea" in board["waiting"]
    assert "<form" not in page.text.replace(board["waiting"], "")  # only open questions
    assert f'fks forge answer {tasks["waiting"]} "…"' in board["waiting"]
    assert 'In a terminal: <code class="terminal">fks forge status</code>' in page.text


def test_answering_on_the_page_does_what_fks_forge_answer_does(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    on_page, in_terminal = new_task(repo, "page", capsys), new_task(repo, "terminal", capsys)
    for task_id in (on_page, in_terminal):
        waiting(repo, task_id, "Red or blue?")
    typed = "  Blue,\r\nlike the sky.\r\n"  # a textarea's line breaks, as browsers send them
    done = post_answer(client, on_page.removeprefix("TASK-").lower(), typed)
    assert done.status_code == 303, done.text
    assert done.headers["location"] == f"/forge/0#{on_page}"
    cli = fks("forge", "answer", in_terminal, "  Blue,\nlike the sky.\n", cwd=repo)
    assert cli.code == 0, cli.output
    store = WorkStore(repo)
    page_item, cli_item = store.get(on_page), store.get(in_terminal)
    assert page_item is not None and cli_item is not None
    assert page_item.answer == cli_item.answer == "Blue,\nlike the sky."
    assert page_item.status == cli_item.status == "waiting" and page_item.continues
    clarifications = repo / ".forge" / "clarifications"
    page_file = (clarifications / f"{on_page}.md").read_text()
    assert page_file.replace(on_page, "ID").replace("page", "T") == (
        (clarifications / f"{in_terminal}.md").read_text().replace(in_terminal, "ID")
    ).replace("terminal", "T")
    assert page_file.endswith("## Answer\n\nBlue,\nlike the sky.\n")
    listed = fks("forge", "clarifications", cwd=repo)
    assert listed.stdout.strip() == "No open questions.", listed.output
    board = columns(client.get(done.headers["location"]).text)["waiting"]
    assert "Blue,\nlike the sky." in board and "<textarea" not in board
    assert "continues it" in board


@pytest.mark.claude  # the stages resolve the claude CLI on PATH, even on the fake sandbox
def test_a_task_answered_on_the_page_is_continued_by_the_next_run(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    from sandbox_runner.forge.worker import process_task

    task_id = new_task(repo, "unclear", capsys)
    question = {"resolved": False, "question": "Red or blue?"}
    ctx, _ = context(repo, [answer({**ANALYSIS, "sufficient": False}), answer(question)])
    first = process_task(ctx, task_id, max_cost=None)
    assert first is not None and first.status == "waiting"
    assert "Red or blue?" in columns(client.get("/forge").text)["waiting"]
    assert post_answer(client, task_id, "Blue.").status_code == 303
    prompts: list[str] = []

    def architect(spec: Any) -> Any:
        prompts.append(" ".join(spec.argv))
        return answer({"resolved": True, "analysis": ANALYSIS})

    ctx, _ = context(repo, [architect, commit({"a.txt": "blue\n"}), answer(APPROVED)])
    done = process_task(ctx, task_id, max_cost=None)
    assert done is not None and done.status == "completed", done
    assert "Blue." in prompts[0] and "Red or blue?" in prompts[0]
    assert task_id in columns(client.get("/forge").text)["landed"]


def test_a_wrong_answer_is_one_line_on_the_board_and_the_text_is_given_back(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    open_task, quiet = new_task(repo, "open", capsys), new_task(repo, "quiet", capsys)
    waiting(repo, open_task, "Which?")
    cases = [
        (open_task, "   ", 400, "the answer is empty"),
        (open_task, "x" * (ANSWER_LIMIT + 1), 400, "shorten it"),
        (quiet, "yes", 400, f"{quiet} has no open question"),
        ("TASK-zzzzzz", "yes", 400, "no task TASK-zzzzzz"),
        ("bad$id", "yes", 400, "bad$id:"),
    ]
    for task_id, text, code, why in cases:
        done = post_answer(client, task_id, text)
        assert done.status_code == code, (task_id, done.text)
        errors = re.findall(r'<p class="error" role="alert">(.*?)</p>', done.text, re.S)
        assert len(errors) == 1 and why in errors[0] and "\n" not in errors[0], errors
    kept = post_answer(client, open_task, "my <long> answer " + "y" * ANSWER_LIMIT)
    assert "my &lt;long&gt; answer yyy" in columns(kept.text)["waiting"]  # not lost
    huge = post_answer(client, open_task, "z" * (12 * ANSWER_LIMIT + 2000))
    assert huge.status_code == 413 and "shorten it" in huge.text
    assert post_answer(client, open_task, "ok", project=3).status_code == 404
    left = WorkStore(repo).get(open_task)
    assert left is not None and left.answer is None
    assert "## Answer" not in (repo / ".forge" / "clarifications" / f"{open_task}.md").read_text()


def test_only_the_pages_own_posts_answer(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "guarded", capsys)
    waiting(repo, task_id, "Which?")
    url = f"/forge/0/tasks/{task_id}/answer"
    refused = [
        post_answer(client, task_id, "evil", Origin="http://evil.example"),
        post_answer(client, task_id, "evil", Origin="null"),
        post_answer(client, task_id, "evil", **{"Sec-Fetch-Site": "cross-site"}),
        client.post(url, data={"answer": "evil"}, follow_redirects=False),  # no Origin
    ]
    with client_for(repo, token=False) as stranger:  # no cookie: never opened the URL
        refused.append(post_answer(stranger, task_id, "evil"))
    for done in refused:
        assert done.status_code == 403 and done.text.startswith("fks ui: refused"), done.text
    left = WorkStore(repo).get(task_id)
    assert left is not None and left.answer is None
    assert post_answer(client, task_id, "fine").status_code == 303
    answered = WorkStore(repo).get(task_id)
    assert answered is not None and answered.answer == "fine"


SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=alert(1)>"
SVG = "<svg onload=alert(2)><style>body{background:url(http://evil.example/x)}</style></svg>"
TERMINAL = "\x1b]52;c;eA==\x07clip \x1b[2Jname\u202egpj.sh"


SAFE_TAGS = {
    *("html", "head", "meta", "title", "link", "script", "body", "header", "nav", "a", "main"),
    *("h1", "h2", "h3", "h4", "small", "section", "article", "p", "span", "code", "pre", "ul"),
    *("li", "div", "details", "summary", "form", "label", "textarea", "button", "footer"),
}


class Tags(HTMLParser):
    """The elements, attributes and scripts of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.attributes: list[tuple[str, str]] = []
        self.scripts: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)
        self.attributes += [(name, value or "") for name, value in attrs]
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))


def test_what_agents_wrote_is_escaped_everywhere_on_the_board(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    asking = new_task(repo, f"title {SCRIPT} {IMG}", capsys)
    reviewed = new_task(repo, "reviewed", capsys)
    waiting(repo, asking, f"</pre></textarea>{SCRIPT}\n[fks] Landed {TERMINAL}")
    review = ReviewResult(approved=False, issues=[SVG, "javascript:alert(3)"], suggestions=[IMG])
    item(repo, reviewed, status="failed", stage="review", review=review,
         branch=f"fks/forge/x\"><a href=\"javascript:alert(4)\">{TERMINAL}",
         error=f"{SCRIPT} {TERMINAL}", feedback=SVG)  # fmt: skip
    item(repo, "TASK-gone00", title=f"{SCRIPT}{TERMINAL}", status="waiting", question=IMG)
    page = client.get("/forge")
    assert page.status_code == 200, page.text
    html = page.text
    tags = Tags()
    tags.feed(html)
    assert tags.names <= SAFE_TAGS, tags.names - SAFE_TAGS
    assert tags.scripts == [f"{ORIGIN}/static/live.js"]  # no other script, inline or remote
    assert not [a for a in tags.attributes if a[0].startswith("on") or a[0] == "style"]
    links = [value for name, value in tags.attributes if name in ("href", "src", "action")]
    assert links and all(link.startswith(f"{ORIGIN}/") for link in links), links
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert "&lt;/pre&gt;&lt;/textarea&gt;" in html and "&lt;svg onload=alert(2)&gt;" in html
    assert "\x1b" not in html and "\x07" not in html and "\u202e" not in html
    assert "&lt;U+202E&gt;gpj.sh" in html
    assert html.count("<form") == 1  # the task without a task file gets no form
    assert "content-security-policy" in page.headers
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_with_every_project_each_has_its_board_and_commands_name_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = init_repo(tmp_path / "first")
    second = init_repo(tmp_path / "second project")
    monkeypatch.chdir(second)
    task_id = new_task(second, "over there", capsys)
    waiting(second, task_id, "Which one?")
    with client_for(first, second) as client:
        listing = client.get("/forge")
        assert listing.status_code == 200
        assert f'href="{ORIGIN}/forge/1"' in listing.text
        assert str(second) in listing.text
        board = client.get("/forge/1")
        assert "Which one?" in columns(board.text)["waiting"]
        assert f"fks forge status --cwd &#39;{second}&#39;" in board.text
        assert task_id not in client.get("/forge/0").text
        assert client.get("/forge/2").status_code == 404
        assert post_answer(client, task_id, "that one", project=1).status_code == 303
    answered = WorkStore(second).get(task_id)
    assert answered is not None and answered.answer == "that one"


def test_an_unreadable_record_is_one_line_naming_it_and_the_fix(
    repo: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "fine", capsys)
    tasks = repo / "forge" / "tasks"
    (tasks / f"task-zz9 - {IMG}\u202e.md").write_text("not a task\n")
    page = client.get("/forge")
    assert page.status_code == 200 and task_id in columns(page.text)["todo"]
    warnings = re.findall(r'<p class="warning">(.*?)</p>', page.text, re.S)
    assert len(warnings) == 1 and "fix the task file" in warnings[0], warnings
    assert "<img" not in warnings[0] and "\u202e" not in warnings[0]
    (repo / ".forge" / "work").mkdir(parents=True)
    (repo / ".forge" / "work" / f"{task_id}-001.yaml").write_text("status: [\n")
    broken = client.get("/forge")
    errors = re.findall(r'<p class="error" role="alert">(.*?)</p>', broken.text, re.S)
    assert broken.status_code == 500 and len(errors) == 1, broken.text
    assert f"{task_id}-001.yaml is not a valid forge work item" in errors[0]
    assert "fix or delete it" in errors[0] and "Traceback" not in broken.text
