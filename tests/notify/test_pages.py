"""Where a notification links: only to a live `fks ui` that serves the project, under its own
`fks-….localhost` name; a state file that says anything else links nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_runner.notify.pages import page, published

ORIGIN = "http://fks-" + "ab" * 16 + ".localhost:8400"


def test_a_link_only_to_a_live_ui_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    project, other = tmp_path / "p", tmp_path / "q"
    assert page(project, "/runs/{project}/R") is None
    with published(ORIGIN, [other, project]):
        assert page(project, "/runs/{project}/R") == f"{ORIGIN}/runs/1/R"
        assert page(tmp_path / "r", "/forge/{project}") is None
    assert page(project, "/forge/{project}") is None  # removed when the ui stops
    folder = tmp_path / "state" / "fks" / "ui"
    (folder / "1.json").write_text(json.dumps({"origin": ORIGIN, "projects": [str(project)]}))
    dead = 2**22 + 7  # above the default pid_max: no such process
    (folder / f"{dead}.json").write_text(json.dumps({"origin": ORIGIN, "projects": [str(project)]}))
    assert page(project, "/forge/{project}") == f"{ORIGIN}/forge/0"  # pid 1 lives
    for origin in ("http://evil.example", "javascript:alert(1)", ORIGIN + "/x"):
        (folder / "1.json").write_text(json.dumps({"origin": origin, "projects": [str(project)]}))
        assert page(project, "/forge/{project}") is None
