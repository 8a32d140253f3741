"""The JSON Schema each forge agent answers against (`claude --json-schema`) says everything fks
checks: no answer the schema (and so the claude CLI) lets through is refused by fks afterwards."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from sandbox_runner.forge.models import (
    AnalysisResult,
    ArchitectResult,
    ReviewResult,
    json_schema,
    parse_answer,
)

ABSENT = object()
ANALYSIS = {"complexity": "low", "plan": "Do it.", "sufficient": True}
LONG = "x" * 20_001

CANDIDATES: dict[type[Any], dict[str, list[Any]]] = {
    AnalysisResult: {
        "complexity": [ABSENT, "low", "high", "huge", None],
        "plan": [ABSENT, "", "p", LONG, 3],
        "relevant_files": [ABSENT, [], ["a.py"], ["a"] * 201, "a.py", [1]],
        "context": [ABSENT, "", "c", None],
        "sufficient": [ABSENT, True, False, "no"],
        "extra": [ABSENT, "field"],
    },
    ArchitectResult: {
        "resolved": [ABSENT, True, False, "true", None],
        "analysis": [ABSENT, None, ANALYSIS, {"plan": "no complexity"}, "text"],
        "question": [ABSENT, None, "", "   ", "Which colour?", LONG, 7],
        "extra": [ABSENT, "field"],
    },
    ReviewResult: {
        "approved": [ABSENT, True, False, "yes"],
        "issues": [ABSENT, [], ["fix a"], ["i"] * 201, "fix a"],
        "suggestions": [ABSENT, [], ["s"], None],
        "extra": [ABSENT, "field"],
    },
}


def answers(model: type[Any]) -> list[dict[str, Any]]:
    fields = CANDIDATES[model]
    return [
        {name: value for name, value in zip(fields, combo, strict=True) if value is not ABSENT}
        for combo in itertools.product(*fields.values())
    ]


@pytest.mark.parametrize("model", list(CANDIDATES), ids=lambda m: m.__name__)
def test_every_answer_the_schema_accepts_fks_accepts(model: type[Any]) -> None:
    schema = json.loads(json_schema(model))
    validator = jsonschema.Draft202012Validator(schema)
    accepted = [a for a in answers(model) if validator.is_valid(a)]
    refused = [(a, why) for a in accepted if isinstance(why := parse_answer(model, a), str)]
    assert not refused, refused[:3]
    assert len(accepted) >= 4  # the enumeration holds valid answers, not only broken ones


@pytest.mark.parametrize(
    "answer",
    [
        {"resolved": True},
        {"resolved": True, "analysis": None, "question": "Which?"},
        {"resolved": False},
        {"resolved": False, "question": ""},
        {"resolved": False, "question": "  "},
        {"resolved": False, "analysis": ANALYSIS, "question": "Which?"},
    ],
    ids=[
        "resolved-no-analysis",
        "resolved-null-analysis",
        "open-no-question",
        "empty-question",
        "blank-question",
        "open-with-analysis",
    ],
)
def test_an_architect_answer_fks_refuses_is_refused_by_the_schema(answer: dict[str, Any]) -> None:
    """These passed the schema given to the CLI, then fks refused them: the task failed with
    `0 attempt(s)`. Now the CLI tells the model its answer does not fit, and it answers again."""
    schema = json.loads(json_schema(ArchitectResult))
    assert not jsonschema.Draft202012Validator(schema).is_valid(answer)
    assert isinstance(parse_answer(ArchitectResult, answer), str)


def test_the_schemas_are_objects_at_the_top() -> None:
    """The Messages API refuses a tool input schema with oneOf, anyOf or allOf at its top."""
    for model in CANDIDATES:
        schema = json.loads(json_schema(model))
        assert schema["type"] == "object"
        assert not {"oneOf", "anyOf", "allOf"} & set(schema), model
