"""forge-tasks as agents and people use it: create, list, view, edit, and the one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sandbox_runner.cli.app import app as fks_app
from sandbox_runner.tasks.cli import app

ID = re.compile(r"TASK-[0-9a-z]{6}")


def forge_tasks(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a child process, as an agent in the container would."""
    full_env = {k: v for k, v in os.environ.items() if k != "FORGE_TASKS_ROOT"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sandbox_runner.tasks.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )


class Project:
    """A tmp_path project driven in-process through typer's CliRunner."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        (root / "forge").mkdir()
        monkeypatch.chdir(root)
        monkeypatch.delenv("FORGE_TASKS_ROOT", raising=False)
        self.runner = CliRunner()

    def run(self, *args: str) -> tuple[int, str, str]:
        result = self.runner.invoke(app, list(args), prog_name="forge-tasks")
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    def ok(self, *args: str) -> str:
        code, out, err = self.run(*args)
        assert code == 0, (args, out, err)
        return out

    def create(self, title: str, *args: str) -> str:
        out = self.ok("create", title, *args)
        match = re.fullmatch(r"Created (TASK-[0-9a-z]{6})\n", out)
        assert match, out
        return match.group(1)

    def json(self, *args: str) -> object:
        return json.loads(self.ok(*args, "--json"))

    def files(self) -> list[Path]:
        return sorted((self.root / "forge" / "tasks").glob("*.md"))

    def front_matter(self, task_id: str) -> dict[str, object]:
        (path,) = [p for p in self.files() if p.name.startswith(task_id.lower())]
        data = yaml.safe_load(path.read_text().split("---\n")[1])
        assert isinstance(data, dict)
        return data

    def listed_ids(self, *args: str) -> list[str]:
        return [line.split()[0] for line in self.ok("list", *args).splitlines() if ID.match(line)]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    return Project(tmp_path, monkeypatch)


def test_create_writes_one_markdown_file_named_after_the_new_id(project: Project) -> None:
    task_id = project.create(
        "Add the login page: part 1",
        "--description",
        "Users need to sign in.\n\nSecond paragraph.",
        "--ac",
        "Form shows",
        "--ac",
        "Errors are shown",
        "--label",
        "backend,ui",
        "--label",
        "backend",
        "--priority",
        "HIGH",
    )
    (path,) = project.files()
    assert path.name == f"{task_id.lower()}-add-the-login-page-part-1.md"
    text = path.read_text()
    front = project.front_matter(task_id)
    assert list(front) == [
        "id",
        "title",
        "status",
        "labels",
        "priority",
        "dependencies",
        "created",
        "updated",
    ]
    assert front["id"] == task_id
    assert front["title"] == "Add the login page: part 1"
    assert front["status"] == "To Do"
    assert front["labels"] == ["backend", "ui"]
    assert front["priority"] == "high"
    assert front["dependencies"] == []
    assert front["created"] == front["updated"]
    body = text.split("---\n", 2)[2]
    assert "## Description\n\nUsers need to sign in.\n\nSecond paragraph.\n" in body
    assert "## Acceptance Criteria\n\n- [ ] #1 Form shows\n- [ ] #2 Errors are shown\n" in body
    assert body.rstrip().endswith("## Notes")


def test_file_names_need_no_quoting_and_old_names_are_still_read(project: Project) -> None:
    """A new file's name is an ASCII slug a shell takes as it is; one named as earlier versions
    named them (`task-x - Title.md`) is listed, viewed and edited where it is."""
    task_id = project.create("Épée & ünïcode: `rm -rf /` — $(x) " + "long " * 40)
    (path,) = project.files()
    assert re.fullmatch(rf"{task_id.lower()}-[a-z0-9-]+\.md", path.name), path.name
    assert path.name.startswith(f"{task_id.lower()}-p-e-n-code-rm-rf-x-long-")
    assert len(path.name) <= len(task_id) + 1 + 50 + 3
    old = path.with_name(f"{task_id.lower()} - Old-style.md")
    path.rename(old)
    assert project.listed_ids() == [task_id]
    assert project.ok("edit", task_id, "--status", "done") == f"Updated {task_id}\n"
    assert project.files() == [old] and "status: Done" in old.read_text()
    second = project.create("Second")
    assert second != task_id and f"{second.lower()}-second.md" in [p.name for p in project.files()]


def test_create_defaults_and_explicit_status(project: Project) -> None:
    plain = project.create("Plain")
    started = project.create("Started", "--status", "in-progress", "-p", "low")
    assert project.front_matter(plain)["status"] == "To Do"
    assert project.front_matter(plain)["priority"] == "medium"
    assert project.front_matter(started)["status"] == "In Progress"
    assert project.front_matter(started)["priority"] == "low"


def test_ids_are_distinct_and_typed_case_insensitively(project: Project) -> None:
    created = [project.create(f"Task {n}") for n in range(30)]
    assert len(set(created)) == 30
    assert all(ID.fullmatch(task_id) for task_id in created)
    suffix = created[0].removeprefix("TASK-")
    for spelling in (
        created[0],
        created[0].upper(),
        f"task-{suffix}",
        suffix,
        f"  {suffix.upper()} ",
    ):
        assert project.json("view", spelling)["id"] == created[0]  # type: ignore[index]


def test_list_orders_by_priority_then_creation(project: Project) -> None:
    low = project.create("Low", "-p", "low")
    high1 = project.create("High one", "-p", "high")
    medium = project.create("Medium")
    high2 = project.create("High two", "-p", "high")
    assert project.listed_ids() == [high1, high2, medium, low]
    assert [row["id"] for row in project.json("list")] == [high1, high2, medium, low]  # type: ignore[attr-defined]


def test_list_plain_is_one_stable_line_per_task(project: Project) -> None:
    dep = project.create("Dependency", "-p", "high")
    task = project.create("Login page", "--ac", "a", "--ac", "b", "-l", "ui", "--depends-on", dep)
    project.ok("edit", task, "--check-ac", "2")
    out = project.ok("list")
    assert out == project.ok("list", "--plain")
    assert out.splitlines() == [
        f"{dep}  To Do        high    Dependency",
        f"{task}  To Do        medium  Login page  (labels: ui; depends on: {dep}; AC 1/2)",
    ]
    assert not re.search(r"[\u2500-\u257f]|\x1b\[", out)  # no box drawing, no colour


def test_list_filters_by_status_and_label(project: Project) -> None:
    todo = project.create("Todo", "-l", "api")
    done = project.create("Done one", "-l", "api,ui")
    blocked = project.create("Blocked one", "-l", "ui")
    project.ok("edit", done, "--status", "done")
    project.ok("edit", blocked, "--status", "BLOCKED")
    assert project.listed_ids("--status", "Done") == [done]
    assert project.listed_ids("--status", "to-do") == [todo]
    assert sorted(project.listed_ids("--status", "todo", "--status", "blocked")) == sorted(
        [todo, blocked]
    )
    assert sorted(project.listed_ids("--label", "api")) == sorted([todo, done])
    assert project.listed_ids("--label", "api", "--label", "ui") == [done]
    assert project.ok("list", "--label", "nothing") == "No matching tasks.\n"


def test_list_when_empty(project: Project) -> None:
    assert project.ok("list") == "No tasks.\n"
    assert project.ok("list", "--ready") == "No ready tasks.\n"
    assert project.json("list") == []


def test_ready_means_to_do_with_every_dependency_done(project: Project) -> None:
    schema = project.create("Schema", "-p", "low")
    api = project.create("API", "-p", "high", "--depends-on", schema)
    ui = project.create("UI", "--depends-on", api, "--depends-on", schema)
    docs = project.create("Docs")
    assert project.listed_ids("--ready") == [docs, schema]

    project.ok("edit", schema, "--status", "In Progress")
    assert project.listed_ids("--ready") == [docs]
    project.ok("edit", schema, "--status", "done")
    assert project.listed_ids("--ready") == [api, docs]  # ui still waits for api
    project.ok("edit", docs, "--status", "blocked")
    project.ok("edit", api, "--status", "Done")
    assert project.listed_ids("--ready") == [ui]
    rows = {row["id"]: row["ready"] for row in project.json("list")}  # type: ignore[attr-defined]
    assert rows == {schema: False, api: False, ui: True, docs: False}
    assert project.listed_ids("--ready", "--status", "done") == []


def test_view_plain_and_json(project: Project) -> None:
    dep = project.create("Dependency")
    task = project.create(
        "Login page",
        "-d",
        "Why it exists",
        "--ac",
        "Form shows",
        "--ac",
        "Errors",
        "-l",
        "ui",
        "-p",
        "high",
        "--depends-on",
        dep,
    )
    project.ok("edit", task, "--check-ac", "1", "--append-notes", "Started on it")
    out = project.ok("view", task)
    assert out == project.ok("view", task, "--plain")
    lines = out.splitlines()
    assert lines[0] == f"{task} - Login page"
    assert "Status: To Do" in lines
    assert "Priority: high" in lines
    assert "Labels: ui" in lines
    assert f"Dependencies: {dep} (To Do)" in lines
    assert any(line.startswith(f"File: forge/tasks/{task.lower()}-login-page.md") for line in lines)
    assert "Description:\nWhy it exists\n" in out
    assert "Acceptance Criteria:\n- [x] #1 Form shows\n- [ ] #2 Errors\n" in out
    assert out.endswith("Notes:\nStarted on it\n")

    data = project.json("view", task)
    assert isinstance(data, dict)
    assert data["id"] == task
    assert data["title"] == "Login page"
    assert data["status"] == "To Do"
    assert data["priority"] == "high"
    assert data["labels"] == ["ui"]
    assert data["dependencies"] == [dep]
    assert data["ready"] is False
    assert data["description"] == "Why it exists"
    assert data["notes"] == "Started on it"
    assert data["acceptance_criteria"] == [
        {"index": 1, "text": "Form shows", "checked": True},
        {"index": 2, "text": "Errors", "checked": False},
    ]
    assert data["file"] == f"forge/tasks/{task.lower()}-login-page.md"


@pytest.mark.parametrize(
    ("spelling", "status"),
    [
        ("done", "Done"),
        ("DONE", "Done"),
        ("in-progress", "In Progress"),
        ("In Progress", "In Progress"),
        ("in_progress", "In Progress"),
        ("todo", "To Do"),
        ("To Do", "To Do"),
        ("blocked", "Blocked"),
        ("Blocked", "Blocked"),
    ],
)
def test_edit_status_spellings_are_normalised(project: Project, spelling: str, status: str) -> None:
    task = project.create("Task", "--status", "blocked" if status == "To Do" else "todo")
    assert project.ok("edit", task, "--status", spelling) == f"Updated {task}\n"
    assert project.front_matter(task)["status"] == status


def test_edit_changes_every_field(project: Project) -> None:
    first = project.create("First")
    second = project.create("Second")
    task = project.create(
        "Old title", "-d", "old", "--ac", "one", "-l", "a,b", "--depends-on", first
    )
    before = project.front_matter(task)
    out = project.ok(
        "edit",
        task,
        "--title",
        "New title",
        "--description",
        "new description",
        "--priority",
        "low",
        "--add-label",
        "c",
        "--remove-label",
        "a",
        "--add-dependency",
        second,
        "--remove-dependency",
        first,
        "--ac",
        "two",
        "--add-ac",
        "three",
        "--check-ac",
        "1",
        "--check-ac",
        "3",
        "--append-notes",
        "note one",
    )
    assert out == f"Updated {task}\n"
    project.ok(
        "edit", task, "--uncheck-ac", "1", "--append-notes", "note two", "--depends-on", first
    )
    after = project.front_matter(task)
    assert after["title"] == "New title"
    assert after["priority"] == "low"
    assert after["labels"] == ["b", "c"]
    assert after["dependencies"] == [second, first]
    assert after["created"] == before["created"]
    assert after["updated"] > before["updated"]  # type: ignore[operator]
    data = project.json("view", task)
    assert isinstance(data, dict)
    assert data["description"] == "new description"
    assert [(c["text"], c["checked"]) for c in data["acceptance_criteria"]] == [
        ("one", False),
        ("two", False),
        ("three", True),
    ]
    assert data["notes"] == "note one\n\nnote two"
    # The file name keeps the creation title, so an edit never turns into a rename in git.
    assert [p.name for p in project.files() if p.name.startswith(task.lower())] == [
        f"{task.lower()}-old-title.md"
    ]


def test_edit_that_changes_nothing_leaves_the_file_alone(project: Project) -> None:
    task = project.create("Task", "--status", "done")
    (path,) = [p for p in project.files() if p.name.startswith(task.lower())]
    before = path.read_bytes()
    assert project.ok("edit", task, "--status", "Done") == f"{task} already up to date\n"
    assert path.read_bytes() == before


def _error_cases(project: Project) -> list[tuple[list[str], str]]:
    task = project.create("Task", "--ac", "only one")
    other = project.create("Other", "--depends-on", task)
    return [
        (["view", "TASK-!!"], "is not a task id"),
        (["view", "TASK-zzzzzz"], "no task TASK-zzzzzz"),
        (["edit", "nope nope", "--status", "done"], "is not a task id"),
        (["edit", task, "--status", "finished"], "unknown status 'finished'"),
        (["list", "--status", "later"], "unknown status 'later'"),
        (["create", "X", "--priority", "urgent"], "unknown priority 'urgent'"),
        (["create", "X", "--status", "someday"], "unknown status 'someday'"),
        (["create", "X", "--depends-on", "TASK-zzzzzz"], "dependency TASK-zzzzzz does not exist"),
        (["create", "   "], "title must not be empty"),
        (["edit", task, "--check-ac", "2"], "no acceptance criterion #2 (it has 1"),
        (["edit", task, "--uncheck-ac", "0"], "no acceptance criterion #0"),
        (["edit", other, "--check-ac", "1"], "it has none; add one with --ac"),
        (["edit", task, "--check-ac", "x"], "--check-ac"),
        (["edit", task, "--check-ac", "1", "--uncheck-ac", "1"], "contradict"),
        (
            ["edit", task, "--add-dependency", "TASK-zzzzzz"],
            "dependency TASK-zzzzzz does not exist",
        ),
        (["edit", task, "--add-dependency", task], "cannot depend on itself"),
        (["edit", task, "--add-dependency", other], f"{other} already depends on {task}"),
        (["edit", task], "nothing to change"),
        (["edit", task, "--append-notes", "  "], "must not be empty"),
        (["edit", task, "--bogus"], "No such option: --bogus"),
        (["list", "--plain", "--json"], "--plain and --json"),
        (["view"], "Missing argument"),
        (["frobnicate"], "No such command"),
    ]


def test_errors_are_one_line_exit_2_and_change_nothing(project: Project) -> None:
    for args, expected in _error_cases(project):
        before = {p: p.read_bytes() for p in project.files()}
        code, out, err = project.run(*args)
        assert code == 2, (args, out, err)
        assert err.count("\n") == 1, (args, err)
        assert err.startswith("forge-tasks: "), (args, err)
        assert expected in err, (args, err)
        assert {p: p.read_bytes() for p in project.files()} == before, args


def test_errors_from_the_installed_command_have_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "forge").mkdir()
    for args in (
        ["view", "TASK-zzzzzz"],
        ["edit", "TASK-zzzzzz", "--status", "x"],
        ["list", "--nope"],
    ):
        result = forge_tasks(tmp_path, *args)
        assert result.returncode == 2, result
        assert result.stderr.startswith("forge-tasks: ")
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr


def test_subprocess_round_trip_an_agent_would_do(tmp_path: Path) -> None:
    (tmp_path / "forge").mkdir()
    created = forge_tasks(tmp_path, "create", "Build it", "--ac", "works", "--priority", "high")
    assert created.returncode == 0, created.stderr
    task = created.stdout.split()[1]
    assert ID.fullmatch(task)
    assert forge_tasks(tmp_path, "list", "--ready", "--plain").stdout.startswith(task)
    assert forge_tasks(tmp_path, "edit", task, "--status", "In Progress").returncode == 0
    assert forge_tasks(tmp_path, "edit", task, "--check-ac", "1").returncode == 0
    assert forge_tasks(tmp_path, "edit", task, "--status", "done").returncode == 0
    view = json.loads(forge_tasks(tmp_path, "view", task, "--json").stdout)
    assert view["status"] == "Done"
    assert view["acceptance_criteria"][0]["checked"] is True
    assert forge_tasks(tmp_path, "list", "--ready", "--plain").stdout == "No ready tasks.\n"


def test_help_is_plain(tmp_path: Path) -> None:
    result = forge_tasks(tmp_path, "--help")
    assert result.returncode == 0
    for command in ("create", "list", "view", "edit"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.MULTILINE)
    edit_help = forge_tasks(tmp_path, "edit", "--help").stdout
    for option in (
        "--check-ac",
        "--uncheck-ac",
        "--append-notes",
        "--add-label",
        "--remove-label",
        "--add-dependency",
        "--root",
    ):
        assert option in edit_help
    assert not re.search(r"[\u2500-\u257f]", result.stdout + edit_help)


def test_fks_tasks_is_the_same_database(project: Project) -> None:
    runner = CliRunner()
    result = runner.invoke(fks_app, ["tasks", "create", "Via fks", "-p", "high"], prog_name="fks")
    assert result.exit_code == 0, result.output
    task = result.stdout.split()[1]
    assert project.listed_ids() == [task]
    result = runner.invoke(fks_app, ["tasks", "view", task, "--bogus"], prog_name="fks")
    assert result.exit_code == 2
    assert result.stderr == "forge-tasks: No such option: --bogus (see `fks tasks view --help`)\n"


def test_cli_module_does_not_import_pydantic_or_yaml(tmp_path: Path) -> None:
    code = (
        "import sys, sandbox_runner.cli.app, sandbox_runner.tasks.cli;"
        "print(sorted(m for m in ('pydantic', 'yaml') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_list_and_view_neutralise_what_an_agent_wrote_in_a_task_file(project: Project) -> None:
    task = project.create("Plain title", "-d", "plain")
    (path,) = project.files()
    hostile = "\x1b]52;c;eA==\x07clip \x1b]0;title\x07\x1b[2Jname\u202egpj.sh"
    # YAML keeps control characters out of the title; the body takes anything.
    text = path.read_text().replace("Plain title", "title\u202egpj.sh")
    path.write_text(text.replace("\nplain", f"\nsaid {hostile}"))
    listed = project.ok("list")
    viewed = project.ok("view", task)
    for out in (listed, viewed):
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
        assert "title<U+202E>gpj.sh" in out
    assert "said clip name<U+202E>gpj.sh" in viewed
