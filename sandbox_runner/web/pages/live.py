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
the event loop, following no link; at most `MAX_STREAMS` streams are open at once (more: 503)."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path, PurePath

import anyio
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from sandbox_runner.nofollow import LinkRefused, open_dir
from sandbox_runner.tasks.store import TASKS_DIR
from sandbox_runner.web.sources import Sources

INTERVAL = 0.5
"""Seconds between two looks at the files of a topic."""
HEARTBEAT = 10
"""Seconds between two comment lines on a quiet stream."""
MAX_STREAMS = 32
"""Live streams open at once (each page open in a browser holds one)."""
MAX_FILES = 20_000
"""Files looked at per folder at most (the newest runs' records come first)."""

Entry = tuple[str, int, int]
"""(a file's path, its modification time in ns, its size)."""
Signature = frozenset[Entry]
"""What a topic's files look like now."""
_FORGE = PurePath(".forge")


class TopicError(ValueError):
    """A topic that names nothing `fks ui` shows."""


def _open(project: Path, relative: PurePath) -> int | None:
    """A descriptor of the folder `project / relative`, no link followed on the way; None when
    it is not there."""
    try:
        return open_dir(project, relative, create=False)
    except (OSError, LinkRefused):
        return None


def _open_in(folder: int, name: str) -> int | None:
    """A descriptor of the folder `name` in `folder`, unless it is a link or not there."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
    except OSError:
        return None


def _stat(fd: int, name: str) -> tuple[int, int] | None:
    """(mtime in ns, size) of the regular file `name` in the folder `fd`."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None


def _folder(fd: int | None, label: str, *, inner: str | None = None) -> Iterator[Entry]:
    """The files of the folder `fd` (closed here), by name; with `inner`, the file `inner` of
    each of its folders instead; at most MAX_FILES, the last names first."""
    if fd is None:
        return
    try:
        names = sorted(
            (e.name for e in os.scandir(fd) if inner is None or e.is_dir(follow_symlinks=False)),
            reverse=True,
        )
        for name in names[:MAX_FILES]:
            path = name if inner is None else f"{name}/{inner}"
            found = _stat(fd, path)
            if found is not None:
                yield (f"{label}/{path}", *found)
    except OSError:
        return
    finally:
        os.close(fd)


def _runs(sources: Sources) -> Signature:
    found: set[Entry] = set()
    for n, project in enumerate(sources.projects):
        # The work items say which forge runs landed (the runs page's totals).
        found.update(_folder(_open(project, _FORGE / "work"), f"{n}/work"))
        found.update(_folder(_open(project, _FORGE / "runs"), f"{n}/runs", inner="run.json"))
    return frozenset(found)


def _run(project: Path, run_id: str) -> Signature:
    """run.json and the logs in its step folders (`01-agent/001.log`)."""
    found: set[Entry] = set()
    run_dir = _open(project, _FORGE / "runs" / run_id)
    if run_dir is None:
        return frozenset()
    try:
        found.update(_folder(os.dup(run_dir), "run"))
        for step in os.scandir(run_dir):
            if step.is_dir(follow_symlinks=False):
                found.update(_folder(_open_in(run_dir, step.name), step.name))
    except OSError:
        pass
    finally:
        os.close(run_dir)
    return frozenset(found)


def _forge(sources: Sources) -> Signature:
    found: set[Entry] = set()
    for n, project in enumerate(sources.projects):
        for folder in (TASKS_DIR, _FORGE / "work", _FORGE / "clarifications"):
            found.update(_folder(_open(project, folder), f"{n}/{folder}"))
    return frozenset(found)


def watcher(sources: Sources, topic: str) -> Callable[[], Signature]:
    """What to look at for `topic` (TopicError: no such topic)."""
    if topic == "runs":
        return lambda: _runs(sources)
    if topic == "forge":
        return lambda: _forge(sources)
    kind, _, rest = topic.partition(":")
    project, _, run_id = rest.partition(":")
    known = project.isdigit() and int(project) < len(sources.projects)
    if kind == "run" and known and run_id in sources.store_of(int(project)).ids():
        where = sources.projects[int(project)]
        return lambda: _run(where, run_id)
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
