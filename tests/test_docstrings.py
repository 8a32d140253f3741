"""Field docstrings become the descriptions of a model's JSON Schema (the config reference and
the schema forge's agents answer to), read only when a schema is made, never at import."""

from __future__ import annotations

import json
import subprocess
import sys

from pydantic import BaseModel, ConfigDict, Field

from sandbox_runner.docstrings import described
from sandbox_runner.forge.models import ArchitectResult, ReviewResult, json_schema


class Base(BaseModel):
    model_config = ConfigDict(json_schema_extra=described(), populate_by_name=True)

    name: str
    """The name,
    on two lines."""
    size: int = Field(default=0, alias="sizeBytes")
    """Bytes."""
    kept: bool = Field(default=False, description="said by the field")
    """Not this."""
    plain: int = 0


class Child(Base):
    model_config = ConfigDict(json_schema_extra=described({"x-rule": 1}))

    extra: str = ""
    """The child's own."""


def test_docstrings_describe_fields_by_alias_inherited_and_after_an_extra() -> None:
    props = Child.model_json_schema()["properties"]
    assert props["name"]["description"] == "The name,\non two lines."
    assert props["sizeBytes"]["description"] == "Bytes."
    assert props["kept"]["description"] == "said by the field"
    assert "description" not in props["plain"]
    assert props["extra"]["description"] == "The child's own."
    assert Child.model_json_schema()["x-rule"] == 1
    assert Base.model_json_schema(by_alias=False)["properties"]["size"]["description"] == "Bytes."


def test_forge_answer_schemas_tell_the_agent_what_each_field_means() -> None:
    review = json.loads(json_schema(ReviewResult))["properties"]
    assert (
        review["approved"]["description"] == "True when the task is done completely and correctly."
    )
    architect = json.loads(json_schema(ArchitectResult))
    assert architect["properties"]["question"]["description"].startswith("One clear")
    assert architect["if"] == {
        "properties": {"resolved": {"const": True}},
        "required": ["resolved"],
    }


def test_importing_the_models_reads_no_source() -> None:
    code = (
        "import linecache\n"
        "read, getlines = [], linecache.getlines\n"
        "linecache.getlines = lambda name, *a: read.append(name) or getlines(name, *a)\n"
        "import sandbox_runner.commands.run, sandbox_runner.forge.models, sandbox_runner.tasks.model\n"
        "from sandbox_runner.plan.config import ChainsConfig\n"
        "ChainsConfig.model_validate({})\n"
        "print(len(read))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0"
