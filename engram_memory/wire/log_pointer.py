"""The JSON pointer of a refused argument, as it may appear in a log line.

A pointer names keys, and an extra key is text the agent wrote, like a value. The pointer is
walked through the tool's published input schema: a segment is logged as it is only where the
schema has it, a property name of that object or an index of that array. Any other segment, and
every segment below it (inside what the agent wrote), is logged as ``*``. A key made of digits
is therefore a ``*`` where an object is expected, never mistaken for an array index.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from engram_memory.wire.schemas import input_schema

__all__ = ["loggable_pointer"]

_INDEX_DIGITS: Final = 6
"""The longest index logged as it is (no array of the schemas reaches a million items)."""


@functools.cache
def _schema(tool: str) -> dict[str, Any]:
    return input_schema(tool)


def loggable_pointer(pointer: str | None, tool: str) -> str:
    """``pointer`` into ``tool``'s arguments for a log line: segments the schema does not have are ``*``.

    ``-`` stands for no pointer and ``/`` for the root. A tool without a published schema logs
    every segment as ``*``.
    """
    if pointer is None:
        return "-"
    if not pointer:
        return "/"
    try:
        node: Any = _schema(tool)
    except (KeyError, ValueError, TypeError):
        node = None
    logged: list[str] = []
    for segment in pointer.split("/")[1:]:
        node = _child(node, segment)
        logged.append(segment if node is not None else "*")
    return "/" + "/".join(logged)


def _child(node: Any, segment: str) -> Any:
    """The schema of ``segment`` inside ``node``, or ``None`` when the schema has no such member."""
    if not isinstance(node, dict):
        return None
    properties = node.get("properties")
    if isinstance(properties, dict) and segment in properties:
        return properties[segment]
    items = node.get("items")
    if isinstance(items, dict) and _is_index(segment):
        return items
    return None


def _is_index(segment: str) -> bool:
    """An array index as a pointer writes it: ASCII decimal, no leading zero, at most six digits."""
    return (
        segment.isascii()
        and segment.isdecimal()
        and len(segment) <= _INDEX_DIGITS
        and (segment == "0" or not segment.startswith("0"))
    )
