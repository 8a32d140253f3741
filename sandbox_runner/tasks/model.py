"""A task file: YAML front matter (a pydantic model) and a Markdown body, parsed and dumped.

```
---
id: TASK-k3f9x2
title: Add the login page
status: To Do
labels:
- backend
priority: high
dependencies: []
created: 2025-01-02 03:04:05.123456+00:00
updated: 2025-01-02 03:04:05.123456+00:00
---

## Description

Why this task exists.

## Acceptance Criteria

- [ ] #1 A testable outcome
- [x] #2 Another one

## Notes

Free text; `edit --append-notes` adds paragraphs here.
```

Dumping is deterministic (fixed key order, criteria renumbered by position), so
`parse(dump(task)) == task` and unchanged tasks never produce a diff.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, field_validator

from sandbox_runner.bounded import LimitExceeded, load_yaml
from sandbox_runner.docstrings import described
from sandbox_runner.tasks import ids
from sandbox_runner.tasks.errors import TaskError

Status = Literal["To Do", "In Progress", "Done", "Blocked"]
Priority = Literal["high", "medium", "low"]
STATUSES: tuple[Status, ...] = ("To Do", "In Progress", "Done", "Blocked")
PRIORITIES: tuple[Priority, ...] = ("high", "medium", "low")

_STATUS_ALIASES: dict[str, Status] = {
    "todo": "To Do",
    "open": "To Do",
    "new": "To Do",
    "inprogress": "In Progress",
    "doing": "In Progress",
    "wip": "In Progress",
    "started": "In Progress",
    "done": "Done",
    "complete": "Done",
    "completed": "Done",
    "closed": "Done",
    "blocked": "Blocked",
}

_PRIORITY_ALIASES: dict[str, Priority] = {
    "high": "high",
    "h": "high",
    "medium": "medium",
    "med": "medium",
    "m": "medium",
    "low": "low",
    "l": "low",
}


def parse_status(raw: str) -> Status:
    """`done`, `in-progress`, `TODO`, `In Progress` … → the canonical spelling."""
    key = re.sub(r"[\s_-]+", "", raw).lower()
    if key not in _STATUS_ALIASES:
        raise TaskError(f"unknown status {raw!r}: use one of {', '.join(map(repr, STATUSES))}")
    return _STATUS_ALIASES[key]


def parse_priority(raw: str) -> Priority:
    """`High`, `med`, `l` … → high, medium or low."""
    key = raw.strip().lower()
    if key not in _PRIORITY_ALIASES:
        raise TaskError(f"unknown priority {raw!r}: use one of high, medium, low")
    return _PRIORITY_ALIASES[key]


def clean_line(text: str, what: str) -> str:
    """One line of text for a title or a criterion: whitespace collapsed, never empty."""
    line = " ".join(text.split())
    if not line:
        raise TaskError(f"{what} must not be empty")
    return line


def _from_text(parse_text: Callable[[str], str]) -> BeforeValidator:
    """Run a forge-tasks parser on a YAML string (or number) inside pydantic validation."""

    def validate(value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            return value
        try:
            return parse_text(value)
        except TaskError as exc:  # pydantic reports ValueErrors with the field's location
            raise ValueError(str(exc)) from None

    return BeforeValidator(validate)


def _utc(value: Any) -> Any:
    """Hand-written `2025-01-02` or naive timestamps are read as UTC."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return value


def _string_list(value: Any) -> Any:
    return [] if value is None else value


TaskId = Annotated[str, _from_text(ids.normalize)]
Timestamp = Annotated[datetime, BeforeValidator(_utc)]


class FrontMatter(BaseModel):
    """The YAML between the `---` lines at the top of a task file."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, json_schema_extra=described()
    )

    id: TaskId
    """`TASK-` plus random base32 characters; see `sandbox_runner.tasks.ids`."""
    title: str
    """One line saying what the task delivers."""
    status: Annotated[Status, _from_text(parse_status)] = "To Do"
    """To Do, In Progress, Done or Blocked (other spellings are normalised)."""
    labels: Annotated[list[str], BeforeValidator(_string_list)] = []
    """Free-form tags such as `backend`."""
    priority: Annotated[Priority, _from_text(parse_priority)] = "medium"
    """high, medium or low: `list` shows high first."""
    dependencies: Annotated[list[TaskId], BeforeValidator(_string_list)] = []
    """Ids of the tasks that must be Done before this one is ready."""
    created: Timestamp
    """When the task was created (UTC); orders tasks of equal priority."""
    updated: Timestamp
    """When the task was last changed (UTC)."""

    @field_validator("title")
    @classmethod
    def _one_line_title(cls, value: str) -> str:
        return clean_line(value, "title")


class Criterion(BaseModel):
    """One `- [ ] #N text` line of the acceptance-criteria checklist."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=described())

    text: str
    """The testable outcome, one line."""
    checked: bool = False
    """Whether the outcome has been reached (`- [x]`)."""


class Section(BaseModel):
    """A body section forge-tasks does not manage (added by hand); kept verbatim."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=described())

    heading: str
    """The text after `## `."""
    text: str
    """Everything up to the next `## ` heading, surrounding blank lines removed."""


class Task(BaseModel):
    """A whole task file: front matter plus the body sections."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=described())

    meta: FrontMatter
    """The front matter."""
    description: str = ""
    """The `## Description` section: why the task exists."""
    acceptance_criteria: list[Criterion] = []
    """The `## Acceptance Criteria` checklist, numbered from 1 by position."""
    notes: str = ""
    """The `## Notes` section."""
    other_sections: list[Section] = []
    """Any other `## ` sections, in file order, dumped after Notes."""

    @property
    def id(self) -> str:
        return self.meta.id


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n?", re.DOTALL | re.MULTILINE)
_HEADING = re.compile(r"^##[ \t]+(.+?)[ \t]*#*[ \t]*$")
_CRITERION = re.compile(r"^[-*][ \t]+\[([ xX])\][ \t]*(?:#\d+[.:)]?[ \t]*)?(.*)$")
_DESCRIPTION, _CRITERIA, _NOTES = "description", "acceptance criteria", "notes"
MAX_FRONT_MATTER = 64 * 1024
"""Characters of YAML between the `---` lines; its nesting and values are bounded too
(`sandbox_runner.bounded`)."""


def parse(text: str, *, where: str) -> Task:
    """Parse a task file; `where` (its path) starts every error message."""
    match = _FRONT_MATTER.match(text)
    if not match:
        raise TaskError(f"{where}: does not start with a `---` YAML front matter block")
    front = match.group(1)
    if len(front) > MAX_FRONT_MATTER:
        raise TaskError(
            f"{where}: front matter is longer than {MAX_FRONT_MATTER // 1024} KiB; shorten it"
        )
    try:
        data = load_yaml(front, max_bytes=MAX_FRONT_MATTER)
    except LimitExceeded as exc:
        raise TaskError(f"{where}: front matter is {exc}") from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise TaskError(f"{where}: front matter is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{where}: front matter must be a YAML mapping of id, title, status, …")
    try:
        meta = FrontMatter.model_validate(data)
    except ValidationError as exc:
        raise TaskError(f"{where}: {_first_problem(exc)}") from None
    return _parse_body(meta, text[match.end() :], where=where)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "front matter"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(FrontMatter.model_fields)
        return f"{field}: unknown front matter key (allowed: {allowed})"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{field}: {message}"


def _parse_body(meta: FrontMatter, body: str, *, where: str) -> Task:
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in body.splitlines():
        found = _HEADING.match(line)
        if found:
            sections.append((found.group(1), []))
        else:
            sections[-1][1].append(line)

    description: list[str] = []
    notes: list[str] = []
    criteria: list[Criterion] = []
    others: list[Section] = []
    for heading, lines in sections:
        key = heading.lower()
        if key in ("", _DESCRIPTION):
            description.extend(lines)
        elif key == _CRITERIA:
            criteria.extend(_parse_criteria(lines, where=where))
        elif key == _NOTES:
            notes.extend(lines)
        else:
            others.append(Section(heading=heading, text=_block(lines)))
    return Task(
        meta=meta,
        description=_block(description),
        acceptance_criteria=criteria,
        notes=_block(notes),
        other_sections=others,
    )


def _parse_criteria(lines: list[str], *, where: str) -> list[Criterion]:
    criteria: list[Criterion] = []
    for line in lines:
        item = _CRITERION.match(line.strip())
        if item:
            text = item.group(2).strip()
            criteria.append(Criterion(text=text, checked=item.group(1) != " "))
        elif line.strip() and line[:1].isspace() and criteria:  # a wrapped criterion
            last = criteria[-1]
            criteria[-1] = last.model_copy(update={"text": f"{last.text} {line.strip()}"})
        elif line.strip():
            raise TaskError(
                f"{where}: Acceptance Criteria line {line.strip()!r} is not a "
                "`- [ ] text` checklist item; fix or move it"
            )
    return criteria


def _block(lines: list[str]) -> str:
    return "\n".join(lines).strip("\n").rstrip()


def dump(task: Task) -> str:
    """The file text for `task`: same task in, same bytes out."""
    meta = task.meta
    front = {
        "id": meta.id,
        "title": meta.title,
        "status": meta.status,
        "labels": list(meta.labels),
        "priority": meta.priority,
        "dependencies": list(meta.dependencies),
        "created": meta.created,
        "updated": meta.updated,
    }
    yaml_text = yaml.dump(
        front,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1000,
    )
    parts = [f"---\n{yaml_text}---", _section("Description", task.description)]
    checklist = "\n".join(criterion_line(n, c) for n, c in enumerate(task.acceptance_criteria, 1))
    parts.append(_section("Acceptance Criteria", checklist))
    parts.append(_section("Notes", task.notes))
    parts.extend(_section(s.heading, s.text) for s in task.other_sections)
    return "\n\n".join(parts) + "\n"


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes `updated: <time>` rather than an alias when it equals `created`."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def criterion_line(number: int, criterion: Criterion) -> str:
    return f"- [{'x' if criterion.checked else ' '}] #{number} {criterion.text}"


def _section(heading: str, text: str) -> str:
    return f"## {heading}\n\n{text}" if text else f"## {heading}"
