"""The JSON pointer of a refused argument, as it may appear in a log line.

A pointer names keys, and an extra key is text the agent wrote, like a value: only segments that
are property names of the published input schemas, or array indexes, are logged as they are.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from engram_memory.wire.converter import TOOL_NAMES
from engram_memory.wire.schemas import input_schema

__all__ = ["loggable_pointer"]

_INDEX_DIGITS: Final = 6
"""The longest index logged as it is (no list of the schemas reaches a million items)."""


@functools.cache
def _schema_names() -> frozenset[str]:
    """Every property name of the published input schemas: the segments a pointer may log."""
    names: set[str] = set()
    stack: list[Any] = [input_schema(tool) for tool in TOOL_NAMES]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                names.update(properties)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def loggable_pointer(pointer: str | None) -> str:
    """``pointer`` for a log line: each segment a schema name or an index, any other shown as ``*``.

    ``-`` stands for no pointer and ``/`` for the root.
    """
    if pointer is None:
        return "-"
    if not pointer:
        return "/"
    known = _schema_names()
    return "".join("/" + (s if s in known or _is_index(s) else "*") for s in pointer.split("/")[1:])


def _is_index(segment: str) -> bool:
    return segment.isascii() and segment.isdecimal() and len(segment) <= _INDEX_DIGITS
