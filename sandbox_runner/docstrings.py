"""Attribute docstrings (the string right under a field) as the descriptions of a model's JSON
Schema, read only when a schema is made (the config reference, forge's structured answers).

pydantic's `use_attribute_docstrings` reads and tokenizes every such model's source as its
module is imported: about 150 ms of CPU, a third of `fks run`'s start-up, for descriptions that
no validation uses. A model config takes `json_schema_extra=described()` instead (after the
model's own extra, if any).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from functools import cache
from itertools import pairwise
from typing import Any

Schema = dict[str, Any]


@cache
def attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring, of `cls` itself (not its bases)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for field, after in pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def describe(schema: Schema, cls: type) -> None:
    """Give each property of `cls`'s schema its field's docstring (the nearest class's), unless
    it has a description already."""
    properties = schema.get("properties")
    fields = getattr(cls, "model_fields", {})
    if not isinstance(properties, dict):
        return
    for klass in cls.__mro__:
        for name, text in attribute_docs(klass).items():
            field = fields.get(name)
            key = name if field is None or field.alias is None else field.alias
            found = properties.get(key, properties.get(name))
            if isinstance(found, dict):
                found.setdefault("description", text)


def described(extra: Schema | None = None) -> Callable[[Schema, type], None]:
    """A `json_schema_extra` that describes the fields, then adds `extra`."""

    def extend(schema: Schema, cls: type) -> None:
        describe(schema, cls)
        schema.update(extra or {})

    return extend
