"""Live updates: `GET /events?topic=TOPIC` is a server-sent-events stream that sends an event
named `changed` whenever the files behind TOPIC change, and a comment line every few seconds (so
a connection whose page is gone is noticed and closed). A page opts in by naming its topic in
`base.html`'s `live` block (`{% block live %}runs{% endblock %}` puts it in `<body data-live>`);
`static/live.js` then fetches the page again and swaps its `<main>`.

Topics:
  `runs`                    every run record of every project shown, and the forge work items
                            (which runs landed): the runs page
  `run:{project}:{run_id}`  one run: its run.json and its iteration logs; {project} is the
                            project's index in `Sources.projects`, as in `/runs/{project}/{run_id}`
  `forge`                   every project's forge backlog: task files, work items, clarifications

`since` (optional): when the page was loaded, in milliseconds since the epoch (live.js sends
it); a change made after it and before the stream started is sent at once.

One watcher per connection compares sizes and modification times every `INTERVAL` seconds, off
the event loop; at most `MAX_STREAMS` streams are open at once (more: 503)."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from sandbox_runner.records.layout import ForgeLayout
from sandbox_runner.tasks.store import TASKS_DIR
from sandbox_runner.web.sources import Sources

INTERVAL = 0.5
"""Seconds between two looks at the files of a topic."""
HEARTBEAT = 10
"""Seconds between two comment lines on a quiet stream."""
MAX_STREAMS = 32
"""Live streams open at once (each page open in a browser holds one)."""
MAX_FILES = 20_000
"""Files looked at per topic at most (the newest runs' records come first)."""

Signature = frozenset[tuple[str, int, int]]
"""(path, modification time in ns, size) of every file behind a topic."""


class TopicError(ValueError):
    """A topic that names nothing `fks ui` shows."""


def _stat_files(paths: Iterator[str]) -> Signature:
    found: set[tuple[str, int, int]] = set()
    for path in paths:
        if len(found) >= MAX_FILES:
            break
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((path, st.st_mtime_ns, st.st_size))
    return frozenset(found)


def _entries(folder: Path | str) -> list[os.DirEntry[str]]:
    """`folder`'s entries, by name (none when it is missing); links are not followed."""
    try:
        return sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return []


def _runs_files(sources: Sources) -> Iterator[str]:
    for store in sources.stores():
        # The work items say which forge runs landed (the runs page's totals).
        yield from (entry.path for entry in _entries(store.layout.root / "work"))
        for run_dir in reversed(_entries(store.root)):  # the newest first
            yield f"{run_dir.path}{os.sep}run.json"


def _run_files(run_dir: Path) -> Iterator[str]:
    """run.json and the logs in its step folders (`01-agent/001.log`)."""
    yield str(run_dir / "run.json")
    for step_dir in _entries(run_dir):
        if step_dir.is_dir(follow_symlinks=False):
            yield from (entry.path for entry in _entries(step_dir.path))


def _forge_files(sources: Sources) -> Iterator[str]:
    for project in sources.projects:
        root = ForgeLayout(project).root
        for folder in (project / TASKS_DIR, root / "work", root / "clarifications"):
            yield from (entry.path for entry in _entries(folder))


def watcher(sources: Sources, topic: str) -> Callable[[], Signature]:
    """What to look at for `topic` (TopicError: no such topic)."""
    if topic == "runs":
        return lambda: _stat_files(_runs_files(sources))
    if topic == "forge":
        return lambda: _stat_files(_forge_files(sources))
    kind, _, rest = topic.partition(":")
    project, _, run_id = rest.partition(":")
    if kind == "run" and project.isdigit() and int(project) < len(sources.projects):
        store = sources.store_of(int(project))
        if run_id in store.ids():
            run_dir = store.run_dir(run_id)
            return lambda: _stat_files(_run_files(run_dir))
    raise TopicError(f"no live topic {topic[:100]!r}: give runs, forge or run:PROJECT:RUN_ID")


def _newest(signature: Signature) -> int:
    return max((mtime for _, mtime, _ in signature), default=0)


async def _changes(
    look: Callable[[], Signature], since_ns: int | None
) -> AsyncIterator[dict[str, str]]:
    last = await anyio.to_thread.run_sync(look)
    if since_ns is not None and _newest(last) > since_ns:
        yield {"event": "changed", "data": ""}
    while True:
        await anyio.sleep(INTERVAL)
        now = await anyio.to_thread.run_sync(look)
        if now != last:
            last = now
            yield {"event": "changed", "data": ""}


class _CountedStream(EventSourceResponse):
    """A stream that counts itself among the app's open streams while it is served, and ends
    its answer properly when `fks ui` stops (the client then sees the stream close)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope["app"].state
        ended = False

        async def sending(message: Message) -> None:
            nonlocal ended
            ended = ended or (
                message["type"] == "http.response.body" and not message.get("more_body", False)
            )
            await send(message)

        try:
            await super().__call__(scope, receive, sending)
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client is gone
        finally:
            state.live_streams -= 1


async def events(request: Request) -> Response:
    sources: Sources = request.app.state.sources
    try:
        look = watcher(sources, request.query_params.get("topic", ""))
    except TopicError as exc:
        return PlainTextResponse(f"fks ui: {exc}", status_code=404)
    since = request.query_params.get("since", "")
    since_ns = int(since) * 1_000_000 if since.isdigit() and len(since) < 16 else None
    state = request.app.state
    if getattr(state, "live_streams", 0) >= MAX_STREAMS:
        return PlainTextResponse(
            f"fks ui: {MAX_STREAMS} live pages are open already; close some of them",
            status_code=503,
        )
    state.live_streams = getattr(state, "live_streams", 0) + 1
    return _CountedStream(_changes(look, since_ns), ping=HEARTBEAT)


routes = [Route("/events", events, name="events")]
