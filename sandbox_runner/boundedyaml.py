"""YAML that a repository or an agent wrote (task files' front matter, agent definitions, forge
work items), read within bounds.

PyYAML composes a document by recursing once per nesting level, so 3,000 nested `[` are a
`RecursionError`; and an alias is the node it names, so a few lines of anchors ("billion laughs")
become a structure whose expansion (`str()`, a validator walking it) never ends. Every document is
composed here by a `SafeLoader` that counts its nesting depth and its nodes, an alias counting as
the whole subtree it names, and refuses past the limits with a `yaml.YAMLError` before any of it
is built: to the caller the file is malformed like any other, named and skipped.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import Node

MAX_DEPTH = 64
"""Collections inside collections: task files use 2, work items 4."""
MAX_NODES = 10_000
"""Scalars and collections in one document, aliases expanded."""


class YamlLimitError(yaml.YAMLError):
    """The document is nested too deep, or too large once its aliases are expanded."""


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` whose composer counts as it goes (see the module's docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0
        self.expanded: dict[str, int] = {}
        """Nodes under each anchor, its aliases expanded: what one alias to it adds."""

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            self._count(self.expanded.get(event.anchor or "", 1), event)
            return super().compose_node(parent, index)
        if self.depth >= MAX_DEPTH:
            raise YamlLimitError(
                f"nested deeper than {MAX_DEPTH} levels ({_where(event)}); flatten it"
            )
        self.depth += 1
        before = self.nodes
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        self._count(1, event)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self.expanded[anchor] = self.nodes - before
        return node

    def _count(self, nodes: int, event: yaml.Event) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise YamlLimitError(
                f"more than {MAX_NODES:,} values, aliases expanded ({_where(event)}); shorten it"
            )


def _where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"


def load(text: str) -> Any:
    """The one document in `text`, as `yaml.safe_load` gives it; `yaml.YAMLError` (a
    `YamlLimitError` past the bounds) when it is malformed."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
