"""`fks schema`: the JSON Schema of forge/chains.json, for editors."""

from __future__ import annotations

import json

from sandbox_runner.errors import EXIT_COMPLETE
from sandbox_runner.plan.config import config_schema


def run() -> int:
    """Print the JSON Schema of forge/chains.json."""
    print(json.dumps(config_schema(), indent=2))
    return EXIT_COMPLETE
