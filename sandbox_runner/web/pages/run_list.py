"""The runs page: every run, newest first, filtered by status, start date and chain (a plain GET
form), with the totals of what the filter selects and one page of rows at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox_runner.commands.listing import STATUSES, ForgeInfo, failed, forge_info, landed
from sandbox_runner.commands.runs import run_status, span
from sandbox_runner.outcomes import Status
from sandbox_runner.records.record import RunRecord, now
from sandbox_runner.web.cache import RecordCache
from sandbox_runner.web.sources import Sources
from sandbox_runner.web.templating import render

PAGE_SIZE = 100
"""Rows on one page; the totals cover every run the filter selects."""
CHAIN_CHOICES = 200
"""Chains offered as suggestions in the filter."""
_FIRST_DAY, _LAST_DAY = date(1970, 1, 2), date(9998, 12, 30)
"""The days a filter takes: local midnight of each, and of the next, is a time."""


@dataclass(frozen=True)
class RunsQuery:
    """The filters and the page, as the form's query parameters give them."""

    statuses: frozenset[str] = frozenset()
    since: date | None = None
    until: date | None = None
    """The last day included."""
    chain: str = ""
    """Part of the run's chain, DSL or forge task (any case)."""
    page: int = 1

    @classmethod
    def parse(cls, request: Request) -> tuple[RunsQuery, list[str]]:
        """The query of `request`, and one line per parameter that was wrong (then ignored)."""
        params = request.query_params
        errors: list[str] = []
        statuses = {s for s in params.getlist("status") if s}
        for wrong in sorted(statuses - set(STATUSES)):
            errors.append(
                f"status {wrong[:40]!r}: not a run status; choose from {', '.join(STATUSES)}"
            )
        since, until = (_day(params.get(name, ""), name, errors) for name in ("from", "to"))
        page = params.get("page", "1")
        good_page = page.isdigit() and len(page) <= 7 and int(page) >= 1
        if not good_page:
            errors.append(f"page {page[:20]!r}: give a page number from 1")
        return cls(
            statuses=frozenset(statuses & set(STATUSES)),
            since=since,
            until=until,
            chain=params.get("chain", "").strip()[:200],
            page=int(page) if good_page else 1,
        ), errors

    def select(self, rows: Sequence[Row]) -> list[Row]:
        """The rows this query selects, in their order."""
        start = _midnight(self.since) if self.since else None
        end = _midnight(self.until + timedelta(days=1)) if self.until else None
        chain = self.chain.casefold()
        return [
            row
            for row in rows
            if (not self.statuses or row.status in self.statuses)
            and (start is None or row.record.started >= start)
            and (end is None or row.record.started < end)
            and (not chain or chain in row.label.casefold())
        ]

    def link(self, page: int = 1) -> str:
        """The URL query of this selection on `page`."""
        found = [("status", s) for s in sorted(self.statuses)]
        found += [(n, d.isoformat()) for n, d in (("from", self.since), ("to", self.until)) if d]
        found += [("chain", self.chain)] if self.chain else []
        found += [("page", str(page))] if page > 1 else []
        return "?" + urlencode(found)

    def terminal(self) -> str:
        """The `fks runs` that lists the same (it has no end date nor chain filter)."""
        command = "fks runs"
        if self.statuses:
            command += f" --status {','.join(sorted(self.statuses))}"
        if self.since:
            command += f" --since {self.since.isoformat()}"
        return command


@dataclass(frozen=True)
class Row:
    """One run as the page shows it."""

    project: int
    record: RunRecord
    label: str
    status: str

    @property
    def duration(self) -> str:
        if self.status == Status.RUNNING:
            return span(self.record.started, now(), self.record.pauses)  # so far
        if self.status == "died":
            return "-"
        return span(self.record.started, self.record.ended, self.record.pauses)

    @property
    def href(self) -> str:
        """The run's page."""
        return f"/runs/{self.project}/{quote(self.record.id, safe='')}"


def _day(text: str, name: str, errors: list[str]) -> date | None:
    if not text.strip():
        return None
    try:
        day = date.fromisoformat(text.strip()[:40])
    except ValueError:
        day = None
    if day is None or not _FIRST_DAY <= day <= _LAST_DAY:
        errors.append(f"{name} {text[:40]!r}: give a date as YYYY-MM-DD (from 1970 to 9998)")
        return None
    return day


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min).astimezone()


def label(record: RunRecord, forge: ForgeInfo) -> str:
    """The chain, DSL or forge task of `record` (with the task's title)."""
    task = record.options.forge_task
    title = forge.titles.get(task) if task else None
    return f"{record.label} {title}" if title else record.label


def _row(project: int, record: RunRecord, forge: ForgeInfo) -> Row:
    return Row(project, record, label(record, forge), run_status(record))


def totals(
    rows: Sequence[Row], forges: Sequence[ForgeInfo], cache: RecordCache
) -> dict[str, float]:
    """What `fks runs` prints under its table, over `rows`."""
    facts = [cache.facts(r.record) for r in rows]
    return {
        "runs": len(rows),
        "landed": sum(landed(r.record, forges[r.project]) for r in rows),
        "failed": sum(failed(r.record) for r in rows),
        "cost": sum(f.cost for f in facts),
    }


def runs_page(request: Request) -> Response:
    sources: Sources = request.app.state.sources
    query, errors = RunsQuery.parse(request)
    forges = [forge_info(project) for project in sources.projects]
    every = [_row(project, record, forges[project]) for project, record in sources.runs()]
    rows = query.select(every)
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(query.page, pages)
    return render(
        request,
        "runs.html",
        status_code=400 if errors else 200,
        rows=rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE],
        first=(page - 1) * PAGE_SIZE + 1,
        page=page,
        pages=pages,
        totals=totals(rows, forges, sources.cache),
        query=query,
        errors=errors,
        statuses=STATUSES,
        chains=sorted({row.label for row in every})[:CHAIN_CHOICES],
        projects=[(p.name or str(p), str(p)) for p in sources.projects],
        show_project=sources.every or len(sources.projects) > 1,
        terminal=query.terminal(),
    )


routes = [Route("/", runs_page, name="runs")]
