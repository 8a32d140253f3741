"""The forge page: the backlog as a board by stage, from the task files and the forge work items
as `fks forge status` reads them, with each open clarification answerable from the page (what
`fks forge answer` does)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from sandbox_runner.commands.forge_task import ANSWER_LIMIT, record_answer
from sandbox_runner.errors import FksError
from sandbox_runner.forge.board import TaskBoard
from sandbox_runner.forge.work import WorkItem, WorkStore
from sandbox_runner.outcomes import WorkStatus
from sandbox_runner.tasks import ids
from sandbox_runner.tasks.errors import TaskError
from sandbox_runner.tasks.store import TaskStore
from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import render

COLUMNS = (
    ("todo", "to do"),
    ("analyzing", "analyzing"),
    ("implementing", "implementing"),
    ("review", "in review"),
    (WorkStatus.WAITING, "waiting for an answer"),
    (WorkStatus.IN_PR, "in a pull request"),
    ("landed", "landed"),
    (WorkStatus.FAILED, WorkStatus.FAILED),
)
_BY_STATUS = {
    WorkStatus.IN_PR: WorkStatus.IN_PR,
    WorkStatus.COMPLETED: "landed",
    WorkStatus.FAILED: WorkStatus.FAILED,
    WorkStatus.WAITING: WorkStatus.WAITING,
}
"""The column of a task whose work item stands so, whatever its stage."""
_BY_STAGE = {
    "analyze": "analyzing",
    "architect": "analyzing",
    "implement": "implementing",
    "review": "review",
    "integrate": "review",
    "done": "landed",
}
BODY_LIMIT = 12 * ANSWER_LIMIT + 1024
"""Bytes of an answer's form: each character percent-encoded as UTF-8 takes at most 12."""
TOO_LONG = f"the answer is longer than the {ANSWER_LIMIT} characters an answer may have; shorten it"


@dataclass
class Card:
    """One task on the board."""

    task_id: str
    title: str
    column: str
    status: str
    """The task file's status, or the work item's status and stage."""
    item: WorkItem | None = None
    answerable: bool = False
    """Waiting for an answer nobody gave yet, with an id the answer's URL can carry."""
    draft: str = ""
    """An answer the page could not record, given back to the user."""

    @property
    def issues(self) -> list[str]:
        review = self.item.review if self.item else None
        return list(review.issues) if review and not review.approved else []

    @property
    def suggestions(self) -> list[str]:
        review = self.item.review if self.item else None
        return list(review.suggestions) if review else []


@dataclass
class Board:
    """A project's cards by column, and the task files that could not be read."""

    project: Path
    columns: dict[str, list[Card]] = field(default_factory=lambda: {k: [] for k, _ in COLUMNS})
    problems: list[str] = field(default_factory=list)

    def card(self, task_id: str) -> Card | None:
        return next((c for cs in self.columns.values() for c in cs if c.task_id == task_id), None)


def column_of(task_status: str | None, item: WorkItem | None) -> str:
    """Where a task stands: its work item's status and stage, else its task file's status."""
    if item is None:
        return "landed" if task_status == "Done" else "todo"
    return _BY_STATUS.get(item.shown_status) or _BY_STAGE[item.stage]


def read_board(project: Path) -> Board:
    """The board of `project` (FksError: a task folder or work item that cannot be read)."""
    try:
        loaded = TaskStore(project).load()
    except TaskError as exc:
        raise FksError(str(exc)) from None
    tasks = loaded.tasks
    items = {item.task_id: item for item in WorkStore(project).items()}
    board = Board(project, problems=TaskBoard(project).problems(loaded))
    titles = {tf.task.id: (tf.task.meta.title, tf.task.meta.status) for tf in tasks}
    for task_id in sorted(titles.keys() | items.keys()):
        title, task_status = titles.get(task_id, ("", None))
        item = items.get(task_id)
        card = Card(
            task_id=task_id,
            title=title or (item.title if item else ""),
            column=column_of(task_status, item),
            status=item.state if item else str(task_status),
            item=item,
            answerable=bool(item and item.status == WorkStatus.WAITING and not item.answer)
            and task_id in titles
            and _valid_id(task_id),
        )
        board.columns[card.column].append(card)
    return board


def _valid_id(task_id: str) -> bool:
    try:
        return ids.normalize(task_id) == task_id
    except TaskError:
        return False


def _project(request: Request) -> tuple[int, Path] | None:
    sources: Sources = request.app.state.sources
    number: int = request.path_params.get("project", 0)
    if not 0 <= number < len(sources.projects):
        return None
    return number, sources.projects[number]


def _no_project(request: Request) -> Response:
    return PlainTextResponse(
        f"fks ui: no project {request.path_params.get('project')} here; the forge page lists them",
        status_code=404,
    )


def _cwd_option(sources: Sources, project: Path) -> str:
    """What a terminal command needs to act on `project` (when the page shows several)."""
    return "" if len(sources.projects) == 1 else f" --cwd {shlex.quote(str(project))}"


async def forge_page(request: Request) -> Response:
    sources: Sources = request.app.state.sources
    if "project" not in request.path_params and len(sources.projects) != 1:
        return render(
            request,
            "forge_projects.html",
            projects=list(enumerate(sources.projects)),
            terminal="fks forge status --cwd PROJECT",
        )
    return await _board_page(request)


async def _board_page(
    request: Request, *, status_code: int = 200, error: str = "", draft: tuple[str, str] = ("", "")
) -> Response:
    found = _project(request)
    if found is None:
        return _no_project(request)
    number, project = found
    sources: Sources = request.app.state.sources
    board: Board | None = None
    try:
        board = await run_in_threadpool(read_board, project)
    except FksError as exc:
        error, status_code = str(exc), 500
    if board is not None and (card := board.card(draft[0])) is not None:
        card.draft = draft[1]
    return render(
        request,
        "forge.html",
        status_code=status_code,
        board=board,
        columns=COLUMNS,
        number=number,
        project=project,
        error=error,
        limit=ANSWER_LIMIT,
        cwd_option=_cwd_option(sources, project),
        terminal=f"fks forge status{_cwd_option(sources, project)}",
    )


async def answer_page(request: Request) -> Response:
    """POST: record the form's answer as `fks forge answer` does, then back to the board (303);
    an error is one line on the board, the answer given back."""
    found = _project(request)
    if found is None:
        return _no_project(request)
    number, project = found
    task_id: str = request.path_params["task_id"]
    body = await _bounded_body(request, BODY_LIMIT)
    if body is None:
        return await _board_page(request, status_code=413, error=TOO_LONG)
    try:
        fields = parse_qs(body.decode("ascii", "replace"), keep_blank_values=True, max_num_fields=4)
    except ValueError:  # more fields than the answer form has
        return await _board_page(request, status_code=400, error="not this page's answer form")
    # Browsers send a textarea's line breaks as CRLF: the answer is what the user typed.
    text = (fields.get("answer") or [""])[0].replace("\r\n", "\n")
    try:
        task_id = await run_in_threadpool(
            lambda: record_answer(cwd=project, task=task_id, text=text)
        )
    except FksError as exc:
        return await _board_page(
            request, status_code=400, error=f"{task_id}: {exc}", draft=(task_id, text)
        )
    url = request.url_for("forge_project", project=number)
    return RedirectResponse(f"{url.path}#{task_id}", status_code=303)


async def _bounded_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it passes `limit` bytes (the rest is never read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


routes = [
    Route("/forge", forge_page, name="forge"),
    Route("/forge/{project:int}", forge_page, name="forge_project"),
    Route(
        "/forge/{project:int}/tasks/{task_id}/answer",
        answer_page,
        methods=["POST"],
        name="forge_answer",
    ),
]
