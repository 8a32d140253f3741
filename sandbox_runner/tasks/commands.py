"""The forge-tasks verbs: create, list, view, edit. Each returns an exit code; output goes to stdout."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sandbox_runner.tasks import ids, model, render
from sandbox_runner.tasks.errors import TaskError
from sandbox_runner.tasks.store import TASKS_DIR, Board, TaskFile, TaskStore


@dataclass(frozen=True)
class Changes:
    """What `edit` was asked to change; raw CLI text, validated when applied."""

    title: str | None = None
    description: str | None = None
    status: str | None = None
    priority: str | None = None
    add_labels: Sequence[str] = ()
    remove_labels: Sequence[str] = ()
    add_dependencies: Sequence[str] = ()
    remove_dependencies: Sequence[str] = ()
    add_criteria: Sequence[str] = ()
    check: Sequence[int] = ()
    uncheck: Sequence[int] = ()
    append_notes: str | None = None

    def is_empty(self) -> bool:
        return all(
            not value if isinstance(value, list | tuple) else value is None
            for value in vars(self).values()
        )


def create(
    *,
    root: Path | None,
    title: str,
    description: str = "",
    criteria: Sequence[str] = (),
    labels: Sequence[str] = (),
    priority: str = "medium",
    depends_on: Sequence[str] = (),
    status: str = "To Do",
) -> int:
    store = TaskStore.open(root)
    title = model.clean_line(title, "the title")
    checklist = [model.Criterion(text=model.clean_line(text, "--ac text")) for text in criteria]
    parsed_status, parsed_priority = model.parse_status(status), model.parse_priority(priority)
    with store.locked():
        board = _read(store)
        dependencies = _existing_dependencies(board, depends_on)
        task_id = ids.new_id(board.reserved_ids())
        now = _now(after=(tf.task.meta.created for tf in board.tasks))
        meta = model.FrontMatter(
            id=task_id,
            title=title,
            status=parsed_status,
            labels=_labels(labels),
            priority=parsed_priority,
            dependencies=dependencies,
            created=now,
            updated=now,
        )
        task = model.Task(meta=meta, description=description.strip(), acceptance_criteria=checklist)
        store.write(store.tasks_dir / ids.file_name(task_id, title), task)
    print(f"Created {task_id}")
    return 0


def list_tasks(
    *,
    root: Path | None,
    ready: bool = False,
    statuses: Sequence[str] = (),
    labels: Sequence[str] = (),
    as_json: bool = False,
) -> int:
    store = TaskStore.open(root)
    wanted_statuses = {model.parse_status(status) for status in statuses}
    wanted_labels = set(_labels(labels))
    board = _read(store)
    ready_paths = _ready_paths(board)
    shown = [
        tf
        for tf in sorted(board.tasks, key=_list_order)
        if (not ready or tf.path in ready_paths)
        and (not wanted_statuses or tf.task.meta.status in wanted_statuses)
        and wanted_labels <= set(tf.task.meta.labels)
    ]
    if as_json:
        rows = [
            render.task_json(tf, file=store.relative(tf.path), ready=tf.path in ready_paths)
            for tf in shown
        ]
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    elif shown:
        print("\n".join(render.list_line(tf) for tf in shown))
    elif ready:
        print("No ready tasks.")
    else:
        print("No tasks." if not (wanted_statuses or wanted_labels) else "No matching tasks.")
    return 0


def view(*, root: Path | None, task_ref: str, as_json: bool = False) -> int:
    store = TaskStore.open(root)
    task_id = ids.normalize(task_ref)
    board = _read(store)
    tf = _the_task(board, task_id)
    ready = tf.path in _ready_paths(board)
    file = store.relative(tf.path)
    if as_json:
        print(
            json.dumps(render.task_json(tf, file=file, ready=ready), indent=2, ensure_ascii=False)
        )
    else:
        statuses = _statuses(board)
        dependency_status = {
            dep: " / ".join(sorted(set(statuses[dep])))
            for dep in tf.task.meta.dependencies
            if dep in statuses
        }
        print(render.view_text(tf, file=file, ready=ready, dependency_status=dependency_status))
    return 0


def edit(*, root: Path | None, task_ref: str, changes: Changes) -> int:
    store = TaskStore.open(root)
    task_id = ids.normalize(task_ref)
    if changes.is_empty():
        raise TaskError(
            f"nothing to change for {task_id}: pass e.g. --status, --check-ac N, --append-notes "
            "(`forge-tasks edit --help` lists them)"
        )
    contradictions = sorted(set(changes.check) & set(changes.uncheck))
    if contradictions:
        raise TaskError(
            f"--check-ac {contradictions[0]} and --uncheck-ac {contradictions[0]} contradict each other"
        )
    with store.locked():
        board = _read(store)
        tf = _the_task(board, task_id)
        updated = _apply(tf.task, changes, board)
        if updated == tf.task:
            print(f"{task_id} already up to date")
            return 0
        meta = updated.meta.model_copy(update={"updated": _now(after=[tf.task.meta.updated])})
        store.write(tf.path, updated.model_copy(update={"meta": meta}))
    print(f"Updated {task_id}")
    return 0


def _apply(task: model.Task, changes: Changes, board: Board) -> model.Task:
    fields = _front_matter_changes(task.meta, changes, board)
    body: dict[str, object] = {
        "acceptance_criteria": _criteria(task, changes),
        "notes": _notes(task, changes),
    }
    if changes.description is not None:
        body["description"] = changes.description.strip()
    # Re-validate the front matter so edits obey the same rules as the file format.
    new_meta = model.FrontMatter.model_validate({**task.meta.model_dump(), **fields})
    return task.model_copy(update={"meta": new_meta, **body})


def _front_matter_changes(
    meta: model.FrontMatter, changes: Changes, board: Board
) -> dict[str, object]:
    fields: dict[str, object] = {}
    if changes.title is not None:
        fields["title"] = model.clean_line(changes.title, "the title")
    if changes.status is not None:
        fields["status"] = model.parse_status(changes.status)
    if changes.priority is not None:
        fields["priority"] = model.parse_priority(changes.priority)
    if changes.add_labels or changes.remove_labels:
        removed = set(_labels(changes.remove_labels))
        fields["labels"] = [
            label for label in _labels([*meta.labels, *changes.add_labels]) if label not in removed
        ]
    if changes.add_dependencies or changes.remove_dependencies:
        added = _existing_dependencies(board, changes.add_dependencies, own_id=meta.id)
        removed = {ids.normalize(ref) for ref in changes.remove_dependencies}
        dependencies = [
            dep for dep in dict.fromkeys([*meta.dependencies, *added]) if dep not in removed
        ]
        _refuse_cycle(board, meta.id, added)
        fields["dependencies"] = dependencies
    return fields


def _criteria(task: model.Task, changes: Changes) -> list[model.Criterion]:
    criteria = [*task.acceptance_criteria]
    criteria += [
        model.Criterion(text=model.clean_line(text, "--ac text")) for text in changes.add_criteria
    ]
    for number, checked in [
        *((n, True) for n in changes.check),
        *((n, False) for n in changes.uncheck),
    ]:
        if not 1 <= number <= len(criteria):
            has = f"it has {len(criteria)}" if criteria else "it has none; add one with --ac TEXT"
            raise TaskError(
                f"{task.meta.id} has no acceptance criterion #{number} ({has}; `forge-tasks view {task.meta.id}` lists them)"
            )
        criteria[number - 1] = criteria[number - 1].model_copy(update={"checked": checked})
    return criteria


def _notes(task: model.Task, changes: Changes) -> str:
    notes = task.notes
    if changes.append_notes is not None:
        addition = changes.append_notes.strip()
        if not addition:
            raise TaskError("--append-notes text must not be empty")
        notes = f"{notes}\n\n{addition}" if notes else addition
    return notes


def _read(store: TaskStore) -> Board:
    """Load every task; say on stderr which files were skipped and which ids are doubled."""
    board = store.load()
    for problem in board.problems:
        _warn(f"skipped {problem}")
    by_id: defaultdict[str, list[TaskFile]] = defaultdict(list)
    for tf in board.tasks:
        by_id[tf.task.id].append(tf)
    for task_id, carriers in sorted(by_id.items()):
        if len(carriers) > 1:
            files = ", ".join(repr(store.relative(tf.path)) for tf in carriers)
            _warn(
                f"{task_id} is carried by {len(carriers)} files ({files}); give all but one a new `id:`"
            )
    return board


def _the_task(board: Board, task_id: str) -> TaskFile:
    found = board.with_id(task_id)
    if not found:
        raise TaskError(
            f"no task {task_id} in {TASKS_DIR.as_posix()}/ (`forge-tasks list` shows the ids)"
        )
    if len(found) > 1:
        files = ", ".join(repr(tf.path.name) for tf in found)
        raise TaskError(
            f"{task_id} is ambiguous: {len(found)} files carry it ({files}); "
            "give all but one a new `id:` in the front matter"
        )
    return found[0]


def _existing_dependencies(
    board: Board, refs: Iterable[str], *, own_id: str | None = None
) -> list[str]:
    dependencies: list[str] = []
    for ref in refs:
        dep = ids.normalize(ref)
        if dep == own_id:
            raise TaskError(f"{dep} cannot depend on itself")
        if not board.with_id(dep):
            raise TaskError(
                f"dependency {dep} does not exist (create it first; `forge-tasks list` shows the ids)"
            )
        if dep not in dependencies:
            dependencies.append(dep)
    return dependencies


def _refuse_cycle(board: Board, task_id: str, added: Sequence[str]) -> None:
    """Adding `added` to `task_id` must not make any of them (transitively) depend on `task_id`."""
    graph: defaultdict[str, set[str]] = defaultdict(set)
    for tf in board.tasks:
        graph[tf.task.id].update(tf.task.meta.dependencies)
    for start in added:
        seen: set[str] = set()
        stack = [start]
        while stack:
            current = stack.pop()
            if current == task_id:
                raise TaskError(
                    f"{task_id} cannot depend on {start}: {start} already depends on {task_id}"
                )
            if current not in seen:
                seen.add(current)
                stack.extend(graph[current])


def _statuses(board: Board) -> dict[str, list[str]]:
    statuses: defaultdict[str, list[str]] = defaultdict(list)
    for tf in board.tasks:
        statuses[tf.task.id].append(tf.task.meta.status)
    return dict(statuses)


def _ready_paths(board: Board) -> set[Path]:
    """The files of the To Do tasks whose dependencies all exist and are all Done."""
    statuses = _statuses(board)
    return {
        tf.path
        for tf in board.tasks
        if tf.task.meta.status == "To Do"
        and all(
            dep in statuses and set(statuses[dep]) == {"Done"} for dep in tf.task.meta.dependencies
        )
    }


def _list_order(tf: TaskFile) -> tuple[int, datetime, str]:
    meta = tf.task.meta
    return model.PRIORITIES.index(meta.priority), meta.created, meta.id


def _labels(raw: Iterable[str]) -> list[str]:
    """`--label a,b --label c` → [a, b, c]: comma-split, stripped, de-duplicated, in order."""
    labels = (part.strip() for text in raw for part in text.split(","))
    return list(dict.fromkeys(label for label in labels if label))


def _now(*, after: Iterable[datetime]) -> datetime:
    """Now, but strictly later than `after`, so creation order survives a coarse clock."""
    now = datetime.now(UTC)
    latest = max(after, default=None)
    return max(now, latest + timedelta(microseconds=1)) if latest else now


def _warn(message: str) -> None:
    print(f"forge-tasks: warning: {message}", file=sys.stderr)
