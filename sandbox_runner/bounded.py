"""JSON and YAML that an agent or a repository wrote, parsed only within a bound on its size and
its nesting. Python's parsers recurse once per `[` or `{`: one line of 50,000 of them is a
RecursionError, which no `except ValueError` catches. Here the depth is measured first, by a
linear scan that never recurses, and anything past a bound is a `LimitExceeded` (a ValueError,
like any other malformed input) that says which bound."""

from __future__ import annotations

import json
from array import array
from functools import cache
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

MAX_DEPTH = 100
"""Levels of nesting read at most: far more than fks's files or Claude's events use, far fewer
than Python's recursion limit; a run record holding such data stays readable."""
MAX_YAML_NODES = 100_000
"""Nodes of a YAML document read at most, aliases counted as what they repeat."""

_BRACKETS = b"[]{}"
# Each bracket as a signed byte: +1 opens, -1 closes; every other byte dropped.
_STEPS = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)


class LimitExceeded(ValueError):
    """Data past a bound of size or nesting: its message names the bound."""


def json_depth(data: str | bytes) -> int:
    """How deep the brackets of JSON `data` nest, brackets inside strings not counted."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # Escaped backslashes first: in `"a\\"` the quote ends the string. Then every quote left
    # opens or closes one, so every other piece between quotes is outside the strings.
    for escape in (b"\\\\", b'\\"'):
        if escape in raw:
            raw = raw.replace(escape, b"")
    outside = b"".join(raw.split(b'"')[0::2])
    return max(accumulate(array("b", outside.translate(_STEPS, _NOT_BRACKETS))), default=0)


def check_json(data: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> None:
    """Raises LimitExceeded when `data` is over `max_bytes` or nests deeper than `max_depth`."""
    if len(data) > max_bytes:
        raise LimitExceeded(f"over {max_bytes} bytes")
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # No more opening brackets than levels allowed (the usual case): no need to scan.
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw) > max_depth:
        raise LimitExceeded(f"nested deeper than {max_depth} levels")


def load_json(
    data: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH, **options: Any
) -> Any:
    """`json.loads(data, **options)` once `data` is within both bounds; LimitExceeded when it
    is not, json.JSONDecodeError (a ValueError too) when it is not JSON."""
    check_json(data, max_bytes=max_bytes, max_depth=max_depth)
    try:
        return json.loads(data, **options)
    except RecursionError:  # deep already on the stack: the scan's bound was not low enough
        raise LimitExceeded(
            f"nested deeper than this process can read ({max_depth} allowed)"
        ) from None


def load_yaml(
    text: str | bytes,
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> Any:
    """`yaml.safe_load(text)` within bounds on its size, its nesting and its nodes (an alias
    counts as all it repeats: a few lines of aliases must not make a billion values). Bytes
    must be UTF-8 (or UTF-16 with its BOM). LimitExceeded past a bound, yaml.YAMLError when it
    is not YAML."""
    if len(text) > max_bytes:
        raise LimitExceeded(f"over {max_bytes} bytes")
    loader = _bounded_loader(max_depth, max_nodes)(text)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise LimitExceeded(
            f"nested deeper than this process can read ({max_depth} allowed)"
        ) from None
    finally:
        loader.dispose()


@cache
def _bounded_loader(max_depth: int, max_nodes: int) -> type[yaml.SafeLoader]:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """Composes nodes as SafeLoader does, counting levels and nodes as it goes."""

        def __init__(self, stream: str | bytes) -> None:
            super().__init__(stream)
            self.depth = 0
            self.weights: dict[int, int] = {}
            """Nodes under each node composed so far (by id), itself included."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            if self.depth > max_depth:
                raise LimitExceeded(f"nested deeper than {max_depth} levels")
            alias = self.check_event(yaml.AliasEvent)
            try:
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            if alias:
                if id(node) not in self.weights:  # still being composed: it holds itself
                    raise LimitExceeded("an alias refers to a value that holds it")
                return node  # weighed where its parent adds it up
            weight = 1 + sum([self.weights[id(child)] for child in _children(node)])
            if weight > max_nodes:
                raise LimitExceeded(f"over {max_nodes} values (an alias counts what it repeats)")
            self.weights[id(node)] = weight
            return node

    return BoundedLoader


def _children(node: yaml.Node | None) -> list[yaml.Node]:
    value = node.value if node is not None else None
    if not isinstance(value, list):
        return []
    return [part for item in value for part in (item if isinstance(item, tuple) else (item,))]
