"""End reasons and statuses: run.json keeps their spelling, and records of any fks load."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest

from sandbox_runner import outcomes
from sandbox_runner.errors import FksError
from sandbox_runner.outcomes import Exit, IterationEnd, Status, StepEnd, parse_reason
from sandbox_runner.records.store import RunStore


def test_exit_codes_keep_their_spelling() -> None:
    code = Exit(3)
    assert code == "exit_3" and code.code == 3 and json.dumps(code) == '"exit_3"'
    assert Exit.parse("exit_-9") == Exit(-9) and Exit.parse("exit_-9").code == -9  # type: ignore[union-attr]
    assert Exit.parse("exit_") is None and Exit.parse("exit_3x") is None
    assert copy.deepcopy(code).code == 3 and pickle.loads(pickle.dumps(code)).code == 3
    assert code.text == "the agent exited 3" and code.fix == "its output is in fks logs"


def test_reasons_are_parsed_and_other_text_stays_text() -> None:
    assert parse_reason("max_turns") is IterationEnd.MAX_TURNS
    assert parse_reason("merge_blocked") is StepEnd.MERGE_BLOCKED
    assert isinstance(parse_reason("exit_1"), Exit)
    for text in ("error_max_turns", "git merge failed: boom", ""):
        found = parse_reason(text)
        assert found == text and type(found) is str


def test_every_end_has_a_text_and_every_kind_its_own_values() -> None:
    for end in (*IterationEnd, *StepEnd):
        assert end.text and end.text == end.text.strip(), end
    assert {m.value for m in IterationEnd}.isdisjoint(m.value for m in StepEnd)
    assert outcomes.stops_step_as(IterationEnd.BUDGET) is StepEnd.MAX_COST
    assert outcomes.stops_step_as(IterationEnd.AUTH_ERROR) is IterationEnd.AUTH_ERROR


def test_an_old_record_loads_and_is_saved_as_it_was(tmp_path: Path) -> None:
    """Reasons an older fks wrote (`error_max_turns`) and a failed step's error text load as
    text; known ones as members; saving writes every one back as it was."""
    iteration = {"number": 1, "started": "2024-05-01T10:00:00Z", "log": "01-a/001.log"}
    data = {
        "id": "20240501-100000-abcd",
        "status": "failed",
        "reason": "docker: no such image",
        "started": "2024-05-01T10:00:00Z",
        "pid": 1,
        "cwd": str(tmp_path),
        "options": {"dsl": "a:3"},
        "steps": [
            {
                "index": 1,
                "agent": "a",
                "iterations_max": 3,
                "loop": True,
                "status": "failed",
                "reason": "docker: no such image",
                "iterations": [
                    {**iteration, "reason": "error_max_turns"},
                    {**iteration, "number": 2, "reason": "exit_137"},
                    {**iteration, "number": 3, "reason": "killed"},
                ],
            }
        ],
    }
    run_dir = tmp_path / ".forge" / "runs" / data["id"]
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(data), encoding="utf-8")
    record = RunStore(tmp_path).load(str(data["id"]))
    its = record.steps[0].iterations
    assert record.status is Status.FAILED and record.steps[0].status is Status.FAILED
    assert [it.reason for it in its] == ["error_max_turns", "exit_137", "killed"]
    assert isinstance(its[1].reason, Exit) and its[2].reason is IterationEnd.KILLED
    saved = json.loads(record.model_dump_json())
    assert saved["reason"] == data["reason"] and saved["status"] == "failed"
    assert [it["reason"] for it in saved["steps"][0]["iterations"]] == [
        "error_max_turns",
        "exit_137",
        "killed",
    ]


@pytest.mark.parametrize("status", ["done", 3])
def test_a_record_with_an_unknown_status_is_refused(tmp_path: Path, status: object) -> None:
    run_dir = tmp_path / ".forge" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    record = {
        "id": "r1",
        "status": status,
        "started": "2024-05-01T10:00:00Z",
        "pid": 1,
        "cwd": str(tmp_path),
        "options": {},
    }
    (run_dir / "run.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(FksError, match="is not a valid run record"):
        RunStore(tmp_path).load("r1")
