"""forge-tasks files: ids, the Markdown format, hand edits, doubled ids, and finding the project root."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox_runner.cli.app import app as fks_app
from sandbox_runner.tasks import ids, model
from sandbox_runner.tasks.cli import app
from sandbox_runner.tasks.errors import TaskError
from sandbox_runner.tasks.store import TaskStore


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env, prog_name="forge-tasks")
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def create(title: str, *args: str) -> str:
    code, out, err = run("create", title, *args)
    assert code == 0, err
    return out.split()[1]


@pytest.fixture
def in_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "forge").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORGE_TASKS_ROOT", raising=False)
    yield tmp_path


# ids


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("TASK-k3f9x2", "TASK-k3f9x2"),
        ("task-K3F9X2", "TASK-k3f9x2"),
        (" k3f9x2\n", "TASK-k3f9x2"),
        ("TASK-001", "TASK-001"),
    ],
)
def test_normalize_accepts_the_spellings_people_type(raw: str, expected: str) -> None:
    assert ids.normalize(raw) == expected


@pytest.mark.parametrize("raw", ["", "TASK-", "TASK-k3 f9", "TASK-k3f9!", "#12", "TASK-1.2"])
def test_normalize_rejects_what_cannot_be_an_id(raw: str) -> None:
    with pytest.raises(TaskError, match="is not a task id"):
        ids.normalize(raw)


def test_new_id_uses_the_unambiguous_alphabet_and_skips_taken_ids() -> None:
    scripted = iter("aaaaaa" + "aaaaab")
    assert ids.new_id({"TASK-aaaaaa"}, choose=lambda _: next(scripted)) == "TASK-aaaaab"
    fresh = {ids.new_id(set()) for _ in range(2000)}
    assert len(fresh) == 2000
    assert all(set(task_id.removeprefix("TASK-")) <= set(ids.ALPHABET) for task_id in fresh)
    assert not set("ilou") & set(ids.ALPHABET)


def test_file_names_come_from_the_id() -> None:
    assert (
        ids.file_name("TASK-k3f9x2", "Add the login page!") == "task-k3f9x2-add-the-login-page.md"
    )
    assert ids.file_name("TASK-k3f9x2", "???") == "task-k3f9x2.md"
    assert len(ids.file_name("TASK-k3f9x2", "x" * 300)) < 80
    assert ids.id_from_file_name("task-k3f9x2 - Add.md") == "TASK-k3f9x2"
    assert ids.id_from_file_name("task-k3f9x2.md") == "TASK-k3f9x2"
    assert ids.id_from_file_name("task-k3f9x2-add.md") == "TASK-k3f9x2"


# the file format


def _task() -> model.Task:
    moment = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    meta = model.FrontMatter(
        id="TASK-abc123",
        title="A: title with 'quotes' and # hash",
        status="In Progress",
        labels=["x", "y"],
        priority="low",
        dependencies=["TASK-def456"],
        created=moment,
        updated=moment,
    )
    return model.Task(
        meta=meta,
        description="Line one\n\n- a bullet",
        acceptance_criteria=[
            model.Criterion(text="done thing", checked=True),
            model.Criterion(text="open"),
        ],
        notes="some notes",
        other_sections=[model.Section(heading="Plan", text="1. step")],
    )


def test_dump_then_parse_is_the_identity_and_dump_is_deterministic() -> None:
    task = _task()
    text = model.dump(task)
    assert model.parse(text, where="t.md") == task
    assert model.dump(model.parse(text, where="t.md")) == text
    assert "&id" not in text and "*id" not in text  # no YAML aliases between created/updated


def test_hand_edited_files_are_read_leniently(in_project: Path) -> None:
    tasks_dir = in_project / "forge" / "tasks"
    tasks_dir.mkdir()
    (tasks_dir / "task-hand01 - Hand.md").write_text(
        "---\n"
        "id: task-HAND01\n"
        "title: Written by hand\n"
        "status: in progress\n"
        "labels:\n"
        "priority: High\n"
        "created: 2025-01-02\n"
        "updated: 2025-01-02 10:00:00\n"
        "---\n"
        "Intro text before any heading.\n"
        "\n"
        "## Acceptance Criteria\n"
        "- [X] first\n"
        "* [ ] #7 second\n"
        "  wrapped onto a second line\n"
        "\n"
        "## Implementation Plan\n"
        "\n"
        "Keep me.\n"
    )
    code, out, err = run("view", "hand01", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["status"] == "In Progress"
    assert data["priority"] == "high"
    assert data["labels"] == []
    assert data["description"] == "Intro text before any heading."
    assert data["acceptance_criteria"] == [
        {"index": 1, "text": "first", "checked": True},
        {"index": 2, "text": "second wrapped onto a second line", "checked": False},
    ]
    assert data["created"] == "2025-01-02T00:00:00+00:00"

    assert run("edit", "TASK-hand01", "--check-ac", "2")[0] == 0
    text = (tasks_dir / "task-hand01 - Hand.md").read_text()
    assert "- [x] #1 first\n- [x] #2 second wrapped onto a second line\n" in text
    assert text.endswith("## Implementation Plan\n\nKeep me.\n")
    assert "status: In Progress\n" in text


def test_a_broken_file_is_skipped_with_a_warning_naming_file_and_field(in_project: Path) -> None:
    good = create("Good")
    tasks_dir = in_project / "forge" / "tasks"
    (tasks_dir / "task-bad001 - Bad.md").write_text(
        "---\nid: TASK-bad001\ntitle: Bad\nstatus: someday\ncreated: 2025-01-01\nupdated: 2025-01-01\n---\n"
    )
    (tasks_dir / "task-bad002 - Extra.md").write_text(
        "---\nid: TASK-bad002\ntitle: Extra\nowner: me\ncreated: 2025-01-01\nupdated: 2025-01-01\n---\n"
    )
    (tasks_dir / "task-bad003 - Nofront.md").write_text("just text\n")
    (tasks_dir / "README.md").write_text("not a task, not read\n")
    code, out, err = run("list")
    assert code == 0
    assert out.split()[0] == good
    warnings = err.splitlines()
    assert len(warnings) == 3, err
    assert "forge/tasks/task-bad001 - Bad.md: status: unknown status 'someday'" in warnings[0]
    assert "forge/tasks/task-bad002 - Extra.md: owner: unknown front matter key" in warnings[1]
    assert "forge/tasks/task-bad003 - Nofront.md: does not start with a `---`" in warnings[2]
    # A new task never reuses an id that a broken file still carries in its name.
    assert "TASK-bad001" in TaskStore(in_project).load().reserved_ids()


def test_two_files_with_one_id_are_both_listed_and_never_guessed_between(in_project: Path) -> None:
    task = create("Original")
    tasks_dir = in_project / "forge" / "tasks"
    (original,) = tasks_dir.glob("*.md")
    copy = tasks_dir / f"{task.lower()} - Copy.md"
    shutil.copy(original, copy)

    code, out, err = run("list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [task, task]
    assert f"{task} is carried by 2 files" in err

    for args in (["view", task], ["edit", task, "--status", "done"]):
        code, out, err = run(*args)
        assert code == 2
        assert f"{task} is ambiguous: 2 files carry it" in err.splitlines()[-1]
    assert original.read_bytes() == copy.read_bytes()  # the refused edit touched neither


# finding the project root


def test_root_is_the_nearest_directory_with_forge(
    in_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = in_project / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    create("From deep inside")
    assert len(list((in_project / "forge" / "tasks").glob("task-*.md"))) == 1
    assert not (deep / "forge").exists()


def test_root_falls_back_to_the_git_top_level_and_never_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_TASKS_ROOT", raising=False)
    (tmp_path / "forge").mkdir()  # outside the repository: must not be used
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo / "sub")
    create("In the repo")
    assert len(list((repo / "forge" / "tasks").glob("task-*.md"))) == 1
    assert not (tmp_path / "forge" / "tasks").exists()


def test_root_falls_back_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_TASKS_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run("list")[1] == "No tasks.\n"
    create("Here")
    assert len(list((tmp_path / "forge" / "tasks").glob("task-*.md"))) == 1


def test_root_option_and_environment_override_the_search(
    in_project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    by_option = create("By option", "--root", str(elsewhere))
    code, out, _ = run("create", "By env", env={"FORGE_TASKS_ROOT": str(elsewhere)})
    by_env = out.split()[1]
    assert code == 0
    assert not (in_project / "forge" / "tasks").exists()
    code, out, _ = run("list", "--root", str(elsewhere))
    assert sorted(line.split()[0] for line in out.splitlines()) == sorted([by_option, by_env])
    code, _, err = run("list", "--root", str(elsewhere / "missing"))
    assert code == 2
    assert "is not a directory" in err


def test_cwd_finds_the_project_as_fks_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--cwd DIR` is `fks`'s option, spelt, explained and checked the same: the project is
    found from DIR as from the current directory, and a DIR that is none is one line."""
    monkeypatch.delenv("FORGE_TASKS_ROOT", raising=False)
    repo = tmp_path / "repo"
    (repo / "forge").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(tmp_path)
    task = create("From afar", "--cwd", str(repo / "src" / "deep"))
    assert [p.parent for p in (repo / "forge" / "tasks").glob("task-*.md")] == [
        repo / "forge" / "tasks"
    ]
    assert run("list", "--cwd", str(repo / "src"))[1].startswith(task)
    assert run("edit", task, "--status", "done", "--cwd", str(repo))[0] == 0
    code, out, _ = run("view", task.removeprefix("TASK-"), "--json", "--cwd", str(repo / "src"))
    assert code == 0 and json.loads(out)["status"] == "Done"
    by_fks = CliRunner().invoke(fks_app, ["forge", "create", "By fks", "--cwd", str(repo / "src")])
    assert by_fks.exit_code == 0, by_fks.output
    assert len(list((repo / "forge" / "tasks").glob("task-*.md"))) == 2
    assert not (tmp_path / "forge").exists()

    missing = tmp_path / "missing"
    code, _, err = run("list", "--cwd", str(missing))
    refused = CliRunner().invoke(fks_app, ["forge", "create", "T", "--cwd", str(missing)])
    assert code == refused.exit_code == 2
    assert err == f"forge-tasks: --cwd {missing}: not a directory\n"
    assert refused.stderr == f"fks: --cwd {missing}: not a directory\n"
