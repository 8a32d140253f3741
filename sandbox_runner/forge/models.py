"""What the forge agents answer: pydantic models whose JSON Schema goes to `claude --json-schema`
and which validate the answer (`structured_output`) that comes back."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sandbox_runner.console.shown import one_line
from sandbox_runner.docstrings import described

_TEXT = 20_000
_ITEMS = 200
_SHOWN_PATH = 100  # characters shown of the place in an answer that is wrong


class StructuredAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=described())


class AnalysisResult(StructuredAnswer):
    """How to implement one task."""

    complexity: Literal["low", "medium", "high"]
    """low: a few lines in one place; medium: several files; high: design work or risky change."""
    plan: str = Field(min_length=1, max_length=_TEXT)
    """The approach, in a few sentences."""
    relevant_files: list[str] = Field(default_factory=list, max_length=_ITEMS)
    """Paths relative to the repository root."""
    implementation_steps: list[str] = Field(default_factory=list, max_length=_ITEMS)
    """Concrete, ordered steps."""
    context: str = Field(default="", max_length=_TEXT)
    """What the implementer must know."""
    sufficient: bool = True
    """False: the task cannot be planned without more thought (the Architect takes over)."""


_ARCHITECT_RULE: dict[str, Any] = {
    # The Messages API refuses oneOf/anyOf/allOf at the top of a tool's input schema (the answer
    # is a `StructuredOutput` tool call), so the rule is an if/then/else there.
    "if": {"properties": {"resolved": {"const": True}}, "required": ["resolved"]},
    "then": {"properties": {"analysis": {"type": "object"}}, "required": ["analysis"]},
    "else": {
        "properties": {
            "analysis": {"type": "null"},
            "question": {"type": "string", "pattern": r"\S"},
        },
        "required": ["question"],
    },
}


class ArchitectResult(StructuredAnswer):
    """The Architect's verdict: a resolved analysis, or a question for a human."""

    model_config = ConfigDict(json_schema_extra=described(_ARCHITECT_RULE))

    resolved: bool
    """True: `analysis` says how to do the task; false: only a human can answer `question`."""
    analysis: AnalysisResult | None = None
    """The complete analysis (when resolved)."""
    question: str | None = Field(default=None, max_length=_TEXT)
    """One clear, answerable question (when not resolved)."""

    @model_validator(mode="after")
    def _analysis_or_question(self) -> ArchitectResult:
        if self.resolved != (self.analysis is not None):
            raise ValueError("a resolved answer needs an analysis (and only then)")
        if not self.resolved and not (self.question or "").strip():
            raise ValueError("an unresolved answer needs a question")
        return self


class ReviewResult(StructuredAnswer):
    """The reviewer's verdict on an implementation."""

    approved: bool
    """True when the task is done completely and correctly."""
    issues: list[str] = Field(default_factory=list, max_length=_ITEMS)
    """What must be fixed before approval."""
    suggestions: list[str] = Field(default_factory=list, max_length=_ITEMS)
    """Optional improvements."""


Answer = TypeVar("Answer", bound=StructuredAnswer)


def json_schema(model: type[StructuredAnswer]) -> str:
    """The schema passed to `claude --json-schema` (compact: it is one argv entry)."""
    return json.dumps(model.model_json_schema(), separators=(",", ":"))


def parse_answer(model: type[Answer], raw: dict[str, Any] | None) -> Answer | str:
    """The validated answer, or one line saying why it is not one."""
    if raw is None:
        return "the agent gave no structured answer"
    try:
        answer = model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        # A field the answer should not have is named by the agent: shown on one line, cut.
        path = one_line(".".join(str(part) for part in first["loc"]), _SHOWN_PATH)
        why = first["msg"].removeprefix("Value error, ")
        return f"invalid {model.__name__}: {path + ': ' if path else ''}{why}"
    return answer
