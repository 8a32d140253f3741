"""The package's shape: every module imports, no import cycles, no overlong functions."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from enum import StrEnum
from pathlib import Path

import pytest

from sandbox_runner import outcomes

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sandbox_runner"
TESTS = ROOT / "tests"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, *, type_only: bool = False) -> set[str]:
    """Package modules `module` imports at run time (lazy ones in functions included) and, with
    `type_only`, those it imports under TYPE_CHECKING too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {name for name in found if name in MODULES and name != module}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_no_import_cycles() -> None:
    # A package's __init__ is not an edge: importing `a.b` runs `a/__init__` but our
    # __init__ files import nothing. Type-only imports count: two modules that need each
    # other's names are one concern, or share a third module.
    graph = {
        name: {
            m
            for m in _imports(name, path, type_only=True)
            if not PACKAGE.joinpath(*m.split(".")[1:], "__init__.py").exists() or m == name
        }
        for name, path in MODULES.items()
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


# Room to grow: each part of the package stays under these, by its shape (a part near its
# limit is two things), and the messages list every part over one.
FUNCTION_LINES = 50
"""A function's code is shorter: counted from its first statement after the docstring to its
last line, so a typer command's options (its signature) and the docstring are not counted."""
MODULE_LINES = 400
CLASS_LINES = 250
COMPLEXITY = 10
"""McCabe complexity every function stays under: ruff's C901 (`max-complexity` in pyproject)."""
LAZY_IMPORTS = 80
"""Package imports inside function bodies in the whole package, at most: the import graph loses
its trail at each. One stays lazy only for a measured start-up cost, which its module names."""


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in MODULES.items()}


TREES = _trees()


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str)
    if docstring and len(node.body) > 1:
        first = node.body[1]
    assert node.end_lineno is not None
    return node.end_lineno - first.lineno + 1


def test_every_function_is_shorter_than_50_lines() -> None:
    long = [
        f"{name}.{node.name}: {length} lines"
        for name, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := _code_lines(node)) >= FUNCTION_LINES
    ]
    assert not long, "\n".join(long)


def test_every_module_is_shorter_than_400_lines() -> None:
    long = [
        f"{name}: {n} lines"
        for name, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MODULE_LINES
    ]
    assert not long, "\n".join(long)


def test_every_class_is_shorter_than_250_lines() -> None:
    long = [
        f"{name}.{node.name}: {length} lines"
        for name, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and (length := node.end_lineno - node.lineno + 1) >= CLASS_LINES
    ]
    assert not long, "\n".join(long)


def test_every_function_is_under_complexity_10() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lint = config["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] == COMPLEXITY - 1
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select=C901", "--no-cache", str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout


def _lazy_imports(tree: ast.Module) -> int:
    """Imports of the package inside function bodies (each counted once, nested or not)."""
    lazy = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            lazy |= {
                id(node)
                for node in ast.walk(function)
                if (isinstance(node, ast.ImportFrom) and (node.level or _ours(node.module or "")))
                or (isinstance(node, ast.Import) and any(_ours(a.name) for a in node.names))
            }
    return len(lazy)


def _ours(module: str) -> bool:
    return module.split(".")[0] == PACKAGE.name


def test_package_imports_are_at_the_top_of_modules() -> None:
    counts = {name: n for name, tree in TREES.items() if (n := _lazy_imports(tree))}
    listed = [f"{name}: {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    assert sum(counts.values()) <= LAZY_IMPORTS, (
        f"{sum(counts.values())} package imports in function bodies (at most {LAZY_IMPORTS}):\n"
        + "\n".join(listed)
    )


def test_each_docker_label_is_defined_once_in_the_labels_module() -> None:
    """`fks.*` labels are named in `sandbox_runner/labels.py` and nowhere else."""
    labels = PACKAGE / "labels.py"
    defined = [
        target.id
        for node in ast.parse(labels.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    assert len(defined) == len(set(defined)) and "LABEL_RUN" in defined
    elsewhere = []
    for name, path in MODULES.items():
        if path == labels:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assigned = (
                [t for t in node.targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.Assign)
                else []
            )
            elsewhere += [f"{name}: {t.id}" for t in assigned if t.id.startswith("LABEL_")]
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("fks.")
                and node.value.split(".")[1][:1].islower()
                and " " not in node.value
                and node.value != "fks.forge"
            ):
                elsewhere.append(f"{name}:{node.lineno}: {node.value!r}")
    assert not elsewhere, "\n".join(elsewhere)


def test_run_records_are_saved_only_by_their_writer() -> None:
    """`ActiveRun`'s methods are the one writer of run.json: nobody else calls `.save()`."""
    writer = PACKAGE / "records" / "store.py"
    callers = []
    for name, path in MODULES.items():
        if path == writer or path.is_relative_to(PACKAGE / "tasks"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "save"
            ):
                callers.append(f"{name}:{node.lineno}")
    assert not callers, callers


def _calling(name: str) -> dict[str, list[int]]:
    """The package modules that call `name` (as `name(...)` or `x.name(...)`), with the lines."""
    found: dict[str, list[int]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                found.setdefault(module, []).append(node.lineno)
    return found


def test_one_module_makes_backends() -> None:
    """A run's backend is made where the run is opened: `runs.lifecycle`, for `fks run`, forge
    workers and `fks forge run`'s preflight alike."""
    assert list(_calling("make_backend")) == ["sandbox_runner.runs.lifecycle"]


def test_one_module_creates_run_records() -> None:
    """Every run record starts in `runs.lifecycle` (records read back are validated, not built)."""
    assert list(_calling("RunRecord")) == ["sandbox_runner.runs.lifecycle"]


def test_cli_imports_neither_docker_nor_git() -> None:
    """`fks --help` starts fast: the CLI module loads no heavy or backend package."""
    probe = (
        "import sys, sandbox_runner.cli.app; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('docker', 'git', 'tenacity')"
        " or m.startswith(('sandbox_runner.backends', 'sandbox_runner.git'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


# Lower layers never import higher ones (lazy imports included, type-only ones not). Modules
# that import nothing from the package are shared downwards: `outcomes` (every layer names how
# iterations, steps and runs end with it), `console.ansi` (records and the
# image builder strip escapes with it), `console.units` (every display shows costs and byte counts
# with it) and `records.layout` (git keeps `.forge/` out of the user's repository by its names).
_LOWER_LAYERS = ("plan", "steps", "backends", "git", "records", "results", "agentclis")
_NOT_BELOW: dict[tuple[str, ...], tuple[str, ...]] = {
    _LOWER_LAYERS: ("console", "commands", "cli", "tasks", "runs"),
    ("results",): ("plan", "steps", "backends", "git", "records", "runs"),
    ("runs",): ("console", "commands", "cli", "forge", "tasks"),
    ("plan",): ("steps", "backends", "git", "records"),
    ("agentclis",): ("plan", "steps", "backends", "git", "records", "results", "runs", "forge"),
    ("git",): ("steps", "backends", "plan", "records"),
    ("records",): ("steps", "backends"),
    ("images",): ("backends", "steps", "forge", "commands", "cli", "console"),
}
_ALLOWED = {
    "sandbox_runner.outcomes",
    "sandbox_runner.console.ansi",
    "sandbox_runner.console.units",
    "sandbox_runner.records.layout",
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for name, path in MODULES.items():
        for layers, forbidden in _NOT_BELOW.items():
            if _layer(name) not in layers:
                continue
            wrong += [
                f"{name} imports {target}"
                for target in sorted(_imports(name, path))
                if _layer(target) in forbidden and target not in _ALLOWED
            ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(_ALLOWED))
def test_modules_shared_downwards_import_nothing_from_the_package(module: str) -> None:
    assert _imports(module, MODULES[module]) == set()


def test_no_backend_module_imports_the_run_records() -> None:
    """Backends return what happened (a branch bound, a landing, traffic) and read a step's
    record only through `backends.api`'s protocols: none imports `records`, type-only imports
    included, so none can write one."""
    wrong = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        if _layer(name) == "backends"
        for target in sorted(_imports(name, path, type_only=True))
        if _layer(target) == "records"
    ]
    assert not wrong, "\n".join(wrong)


def test_nothing_in_the_package_imports_its_testing_helpers() -> None:
    """`fks_testing` (testing/, a distribution of its own) serves the tests and the benchmarks;
    fks itself never loads it, and its wheel holds no test helper or fake."""
    wrong = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        for target in sorted(_imported_names(path))
        if target.split(".")[0] == "fks_testing"
    ]
    assert not wrong, "\n".join(wrong)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["sandbox_runner*"]
    assert not [p for p in PACKAGE.rglob("*.py") if p.stem in ("fake", "fakes", "testing")]


def _imported_names(path: Path) -> set[str]:
    """Every module name `path` imports, at any depth (lazy imports in functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_test_imports_another_test_module() -> None:
    """What tests share lives in `fks_testing` and the folders' conftest.py files."""
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in sorted(_imported_names(path))
        if any(part.startswith(("test_", "conftest")) for part in name.split("."))
    ]
    assert not wrong, "\n".join(wrong)


def test_pytest_puts_nothing_on_sys_path() -> None:
    """Tests find what they share as a package, never through `pythonpath`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pytest_options = config["tool"]["pytest"]["ini_options"]
    assert "pythonpath" not in pytest_options, pytest_options.get("pythonpath")
    touching = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(TESTS.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert not touching, "sys.path changed in " + ", ".join(touching)


# Words that mean something else where they are spelled: Docker's own states of a swarm task
# (`complete`, `failed`), the `error` key the iteration script writes into its report, JUnit's
# `<error>` element, and the terminal's word for how often a step without :N runs (`once`,
# which that step's end reason is named after).
_OUTCOME_WORDS_ELSEWHERE = {
    "console/output.py": {"once"},
    "backends/docker/swarm/execution.py": {"complete", "failed"},
    "backends/docker/swarm/egress.py": {"complete", "failed"},
    "backends/docker/workspace/export.py": {"error"},
    "records/junit.py": {"error"},
    # What the agent CLIs' own streams say (their event and status names), read as data.
    "agentclis/codex.py": {"error"},
    "agentclis/gemini.py": {"error"},
    "agentclis/opencode.py": {"error", "completed"},
    # The model APIs' own error bodies, made in the proxy's container (it imports no fks).
    "backends/docker/egress/meter.py": {"error", "budget"},
}
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_QUOTED = re.compile(r"""(["'])([a-z_]+)\1""")


def _outcome_words() -> frozenset[str]:
    """Every spelling of an end reason or a status: the values of `outcomes`' enums."""
    kinds = [k for k in vars(outcomes).values() if isinstance(k, type) and issubclass(k, StrEnum)]
    return frozenset(member.value for kind in kinds for member in kind)


def _keys(tree: ast.AST, words: frozenset[str]) -> set[int]:
    """Constants that name a key, not an outcome: `x["error"]`, `x.get("error")`, `"error" in
    x`, and the keys of a dict that holds other keys too (a JSON document's field names)."""
    keys: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            keys.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault"):
                keys.append(node.args[0])
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if not isinstance(node.comparators[0], (ast.Tuple, ast.List, ast.Set)):
                keys.append(node.left)
        elif isinstance(node, ast.Dict):
            named = [k for k in node.keys if isinstance(k, ast.Constant)]
            if any(k.value not in words for k in named):
                keys += named
    return {id(k) for k in keys if isinstance(k, ast.Constant)}


def test_no_end_reason_or_status_is_spelled_outside_the_outcomes_module() -> None:
    """End reasons and statuses are `sandbox_runner.outcomes`' members everywhere else: no
    module (nor template) spells one as a string."""
    words = _outcome_words()
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "outcomes.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        keys, allowed = _keys(tree, words), _OUTCOME_WORDS_ELSEWHERE.get(where, set())
        spelled += [
            f"sandbox_runner/{where}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and node.value in words
            and node.value not in allowed
            and id(node) not in keys
        ]
    for path in sorted((PACKAGE / "web" / "templates").rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        for block in _JINJA.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            spelled += [
                f"sandbox_runner/{path.relative_to(PACKAGE).as_posix()}:{line}: {q[1]!r}"
                for q in _QUOTED.findall(block.group())
                if q[1] in words
            ]
    assert not spelled, "\n".join(spelled)
