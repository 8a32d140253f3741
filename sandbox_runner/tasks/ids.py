"""Task ids that stay unique across git branches without any coordination.

An id is `TASK-` followed by 6 characters drawn uniformly at random (`secrets`) from the
lower-case Crockford base32 alphabet `0123456789abcdefghjkmnpqrstvwxyz` (no i, l, o, u, so
nothing reads as another character): 30 random bits, e.g. `TASK-k3f9x2`.

Why not a counter: two branches (parallel steps, reruns) that both create "the next" task
would both pick TASK-7 and collide on merge.  Random ids need no shared state.  A new id is
also checked against every id and file already present, so one branch never repeats itself;
across branches two ids collide with probability about n*m / 2**30 for n and m tasks created
on each side (300 x 300 tasks: under 1 in 10,000).  Time is deliberately not part of the id:
parallel steps create their tasks at the same moment, so it would only shrink the random part.

The task file name is derived from the id (`task-k3f9x2-short-title.md`: lower-case ASCII
letters, digits and hyphens, the title's part at most 50 characters, nothing a shell would
need quoted), so two branches never add the same path and merging them cannot conflict.
Files named as earlier versions named them (`task-k3f9x2 - Short-title.md`) are read alike.
Should two files ever carry the same id anyway (a hand-made copy), readers list both and
refuse to guess which one `view` or `edit` means.

Ids are matched case-insensitively and the `TASK-` prefix may be left out when typing one.
A hand-written id may have up to 32 such characters: ids name files, branches and work items,
so anything longer or of other characters is refused before a path is made from it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Container

from sandbox_runner.tasks.errors import TaskError

PREFIX = "TASK-"
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
RANDOM_CHARS = 6
MAX_CHARS = 32
FILE_GLOB = "task-*.md"

_SUFFIX = re.compile(rf"[0-9a-z]{{1,{MAX_CHARS}}}")
_SHOWN = 40
_SLUG_JUNK = re.compile(r"[^0-9A-Za-z]+")
_SLUG_MAX = 50


def normalize(raw: str) -> str:
    """`task-K3F9X2`, ` k3f9x2 ` → `TASK-k3f9x2`; anything that cannot be an id → TaskError."""
    text = raw.strip()
    suffix = text[len(PREFIX) :] if text.upper().startswith(PREFIX) else text
    suffix = suffix.lower()
    if not _SUFFIX.fullmatch(suffix):
        shown = repr(raw if len(raw) <= _SHOWN else f"{raw[:_SHOWN]}…")
        if len(raw) > _SHOWN:
            shown += f" ({len(raw)} characters)"
        raise TaskError(
            f"{shown} is not a task id (TASK- and at most {MAX_CHARS} letters and digits, "
            "like TASK-k3f9x2; `forge-tasks list` shows them)"
        )
    return PREFIX + suffix


def new_id(taken: Container[str], *, choose: Callable[[str], str] = secrets.choice) -> str:
    """A fresh id not in `taken` (the ids and file-name stems already in forge/tasks)."""
    while True:
        task_id = PREFIX + "".join(choose(ALPHABET) for _ in range(RANDOM_CHARS))
        if task_id not in taken:
            return task_id


def file_name(task_id: str, title: str) -> str:
    """`TASK-k3f9x2`, "Add the login page!" → `task-k3f9x2-add-the-login-page.md`."""
    stem = task_id.lower()
    slug = _SLUG_JUNK.sub("-", title.lower()).strip("-")[:_SLUG_MAX].rstrip("-")
    return f"{stem}-{slug}.md" if slug else f"{stem}.md"


def id_from_file_name(name: str) -> str | None:
    """The id a file name was derived from (`task-k3f9x2-x.md`, `task-k3f9x2 - X.md` →
    `TASK-k3f9x2`), if any."""
    prefix, _, rest = name.split(" ", 1)[0].removesuffix(".md").partition("-")
    try:
        return normalize(f"{prefix}-{rest.split('-', 1)[0]}")
    except TaskError:
        return None
