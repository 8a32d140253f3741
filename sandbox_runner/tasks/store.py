"""Where the task files live, reading them all, and writing one atomically under a lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

from sandbox_runner import nofollow
from sandbox_runner.tasks import ids, model
from sandbox_runner.tasks.errors import TaskError

ROOT_ENV = "FORGE_TASKS_ROOT"
TASKS_DIR = Path("forge", "tasks")
MAX_TASK_FILE = 1024 * 1024
"""A task file's size limit: a larger one is reported, not read."""


def find_root(start: Path) -> Path:
    """The nearest directory at or above `start` holding `forge/`, else the git top level, else `start`.

    The walk stops at the git top level, so a `forge/` outside the repository is never used.
    """
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / "forge").is_dir() or (directory / ".git").exists():
            return directory
    return start


class TaskFile(NamedTuple):
    """A task and the file it was read from (or will be written to)."""

    path: Path
    task: model.Task


class Board(NamedTuple):
    """Everything in forge/tasks: the tasks that parsed and one message per file that did not."""

    tasks: list[TaskFile]
    problems: list[str]
    file_names: list[str]

    def with_id(self, task_id: str) -> list[TaskFile]:
        return [tf for tf in self.tasks if tf.task.id == task_id]

    def reserved_ids(self) -> set[str]:
        """Ids a new task must not take: in front matter or in a file name (even a broken file's)."""
        reserved = {tf.task.id for tf in self.tasks}
        for name in self.file_names:
            from_name = ids.id_from_file_name(name)
            if from_name:
                reserved.add(from_name)
        return reserved


class TaskStore:
    """The `forge/tasks/` directory of one project."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise TaskError(f"project root {root} is not a directory (check --root / ${ROOT_ENV})")
        self.root = root
        self.tasks_dir = root / TASKS_DIR

    @classmethod
    def open(cls, root: Path | None) -> TaskStore:
        """`root` if given (from --root or $FORGE_TASKS_ROOT), else found from the current directory."""
        return cls(root.resolve() if root is not None else find_root(Path.cwd()))

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def load(self) -> Board:
        """Every `task-*.md` file; one that does not parse becomes a problem, not a failure."""
        tasks: list[TaskFile] = []
        problems: list[str] = []
        with self._tasks_fd(create=False) as fd:
            if fd is None:
                return Board([], [], [])
            names = sorted(n for n in os.listdir(fd) if fnmatch(n, ids.FILE_GLOB))  # noqa: PTH208
            for name in names:
                path = self.tasks_dir / name
                try:
                    text = nofollow.read_file(fd, name, path, MAX_TASK_FILE).decode("utf-8")
                    tasks.append(TaskFile(path, model.parse(text, where=self.relative(path))))
                except TaskError as exc:
                    problems.append(str(exc))
                except nofollow.LinkRefused as exc:
                    problems.append(f"{self.relative(path)} {exc.what}; not read")
                except (OSError, UnicodeDecodeError) as exc:
                    problems.append(f"{self.relative(path)}: cannot be read: {exc}")
        return Board(tasks, problems, names)

    def _open_tasks(self, *, create: bool) -> int | None:
        """forge/tasks/, opened without following a link (None: it does not exist)."""
        try:
            return nofollow.open_dir(self.root, TASKS_DIR, create=create)
        except FileNotFoundError:
            if create:
                raise TaskError(f"cannot use {self.tasks_dir}: it is missing") from None
            return None
        except nofollow.LinkRefused as exc:
            raise TaskError(
                f"{exc}; fks never reads or writes through a link in the project: "
                "replace it with a folder"
            ) from None
        except OSError as exc:
            raise TaskError(
                f"cannot use {self.tasks_dir}: {exc.strerror}; check the path and its permissions"
            ) from None

    @contextlib.contextmanager
    def _tasks_fd(self, *, create: bool) -> Iterator[int | None]:
        fd = self._open_tasks(create=create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise writers: flock on the forge/tasks directory itself, so no lock file is left."""
        with self._tasks_fd(create=True) as fd:
            assert fd is not None
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield  # closing the descriptor releases the lock

    def write(self, path: Path, task: model.Task) -> None:
        """Replace `path` (in forge/tasks/) atomically: readers see the old file or the new
        one, never half; a link there is replaced, never written through."""
        assert path.parent == self.tasks_dir, path
        with self._tasks_fd(create=True) as fd:
            assert fd is not None
            try:
                nofollow.write_file(fd, path.name, model.dump(task).encode("utf-8"))
            except OSError as exc:
                raise TaskError(
                    f"cannot write {self.relative(path)}: {exc.strerror}; check its permissions"
                ) from None
