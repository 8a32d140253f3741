"""`fks schema` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from fks_testing.helpers import fks

CONFIG_TEMPLATE = Path(__file__).parents[2] / "sandbox_runner/templates/init/forge/chains.json"


def test_schema_is_a_json_schema_the_init_config_satisfies() -> None:
    done = fks("schema")
    assert done.code == 0, done.output
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    config = json.loads(CONFIG_TEMPLATE.read_text())
    assert config["$schema"] == "./chains.schema.json"
    assert list(validator.iter_errors(config)) == []
    bad = {**config, "forge": {"parallel": "2", "maxReviewRetries": -1}}
    assert {e.message for e in validator.iter_errors(bad)} >= {"'2' is not of type 'integer'"}
