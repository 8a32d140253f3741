"""`fks init`: scaffold the Ralph defaults (ralph/, system-prompts/fk/, forge/chains.json), the
`fks forge` agents' prompts (system-prompts/forge/) and the config's JSON Schema for editors.

Existing files are never touched; the templates live in `sandbox_runner/templates/init/`.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePath

from sandbox_runner import nofollow
from sandbox_runner.bounded import load_json
from sandbox_runner.errors import EXIT_COMPLETE, FksError, UsageError
from sandbox_runner.git.runner import git_common_dir, git_toplevel
from sandbox_runner.plan.config import config_schema
from sandbox_runner.plan.config_file import CONFIG_BYTES

# In the order they are reported; each is also its path under templates/init/.
FILES = (
    "ralph/PLAN.md",
    "ralph/SPECS.md",
    "ralph/AGENTS.md",
    "system-prompts/fk/planner.md",
    "system-prompts/fk/builder.md",
    "system-prompts/fk/reviewer.md",
    "system-prompts/forge/analyze.md",
    "system-prompts/forge/architect.md",
    "system-prompts/forge/implement.md",
    "system-prompts/forge/review.md",
    "forge/chains.json",
)
SCHEMA = "forge/chains.schema.json"
CONFIG = "forge/chains.json"
FK_AGENTS = ("fk:planner", "fk:builder", "fk:reviewer")
FK_CHAINS = ("ralph", "plan", "build", "review")

NEXT_STEPS = """\
Next steps:
  1. Write what to build in ralph/PLAN.md and the requirements in ralph/SPECS.md
     (replace the examples and delete the fks-template comment at the top of each).
  2. Put your setup, test and check commands in ralph/AGENTS.md.
  3. Commit: git add ralph system-prompts forge && git commit -m "Add fks Ralph setup"
  4. Run:    fks run --chain ralph --sandbox   (build the image once: fks image build)
     or, without Docker: fks run --chain ralph   (not as root: Claude refuses it)"""


def template(relative: str) -> Traversable:
    """The packaged template for `relative` (a path from FILES)."""
    node = resources.files("sandbox_runner") / "templates" / "init"
    for part in relative.split("/"):
        node = node / part
    return node


def run(*, cwd: Path | None) -> int:
    if cwd is not None and not cwd.is_dir():
        raise UsageError(f"--cwd {cwd}: not a directory")
    project = _target(cwd)
    for relative in FILES:
        if _create(project, relative):
            print(f"created {relative}")
        else:
            print(f"kept {relative} (exists)")
            if relative == CONFIG:
                _report_missing(project / CONFIG)
    _write_schema(project)
    print()
    if git_common_dir(project) is None:
        print(
            f"{project} is not a git repository: run 'git init' first (the agents commit their work)."
        )
    print(NEXT_STEPS)
    return EXIT_COMPLETE


def _target(cwd: Path | None) -> Path:
    """--cwd, else the top of the git work tree the current directory is in (fks finds the
    config there from every subdirectory), else the current directory."""
    if cwd is not None:
        return cwd.resolve()
    here = Path.cwd().resolve()
    top = git_toplevel(here)
    if top is None or top.resolve() == here:
        return here
    print(f"Setting up at the top of the repository, {top} (use --cwd . for this directory)")
    return top.resolve()


def _create(project: Path, relative: str) -> bool:
    """Write the template unless something is already there; True when written."""
    import errno
    import os

    parent, name = PurePath(relative).parent, PurePath(relative).name
    content = template(relative).read_bytes()
    try:
        with nofollow.opened_dir(project, parent, create=True) as folder:
            # O_EXCL: a file (or link) there, or one that appears meanwhile, is kept.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o644, dir_fd=folder)
            with os.fdopen(fd, "wb") as out:
                out.write(content)
    except nofollow.LinkRefused as exc:
        raise FksError(_link_refused(exc, f"cannot create {relative} in {project}")) from None
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return False
        raise FksError(f"cannot create {relative} in {project}: {exc.strerror}") from None
    return True


def _write_schema(project: Path) -> None:
    """The schema follows this version of fks: written anew every time."""
    relative = PurePath(SCHEMA)
    text = json.dumps(config_schema(), indent=2) + "\n"
    try:
        with nofollow.opened_dir(project, relative.parent, create=True) as folder:
            nofollow.write_file(folder, relative.name, text.encode("utf-8"))
    except nofollow.LinkRefused as exc:
        raise FksError(_link_refused(exc, f"cannot write {SCHEMA} in {project}")) from None
    except OSError as exc:
        raise FksError(f"cannot write {SCHEMA} in {project}: {exc.strerror}") from None
    print(f"wrote {SCHEMA} (the JSON Schema forge/chains.json refers to)")


def _link_refused(exc: nofollow.LinkRefused, what: str) -> str:
    if exc.what == "is a symlink":
        return f"{exc}; fks init does not write through it - replace it with a folder"
    return f"{what}: {exc}"


def _report_missing(config: Path) -> None:
    """Say which fk agents and chains an existing config lacks; it is never merged."""
    try:
        with config.open("rb") as handle:
            data = load_json(handle.read(CONFIG_BYTES + 1), max_bytes=CONFIG_BYTES)
    except (OSError, ValueError):  # not JSON, or too large or deep to be a config
        print(f"  {CONFIG} cannot be read as JSON; check it with 'fks validate'")
        return
    agents = data.get("agents") if isinstance(data, dict) else None
    chains = data.get("chains") if isinstance(data, dict) else None
    lacking = []
    missing_agents = [n for n in FK_AGENTS if not isinstance(agents, dict) or n not in agents]
    missing_chains = [n for n in FK_CHAINS if not isinstance(chains, dict) or n not in chains]
    if missing_agents:
        lacking.append(
            f"{'agent' if len(missing_agents) == 1 else 'agents'} {', '.join(missing_agents)}"
        )
    if missing_chains:
        lacking.append(
            f"{'chain' if len(missing_chains) == 1 else 'chains'} {', '.join(missing_chains)}"
        )
    if lacking:
        print(f"  it lacks {' and '.join(lacking)}. It was not changed; copy them")
        print("  from the forge/chains.json that 'fks init --cwd <empty dir>' writes.")
