"""The base of every config file model: unknown keys are errors, values are frozen, and each
field's docstring is its description (in `fks validate --schema`).

Numbers are `StrictInt`/`StrictFloat` and flags `StrictBool`: JSON has no "3" for 3 or true
for 1, so a quoted or boolean number is a mistake worth naming.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sandbox_runner.docstrings import described


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        frozen=True,
        defer_build=True,
        json_schema_extra=described(),
    )
