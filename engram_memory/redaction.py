"""Redaction by omission through the policy's field allowlist (DESIGN D12).

An allowlist holds RFC 6901 JSON pointers; ``""`` keeps the whole record. Pointers that traverse
an array are ignored (whole arrays only), missing paths are ignored, ``/record_id`` is always kept.
``redacted_fields`` lists the removed top-level keys as sorted, escaped JSON pointers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["redact_record"]


def _decode_pointer(pointer: str) -> list[str] | None:
    """RFC 6901 reference tokens of ``pointer``; ``None`` for a malformed pointer."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        return None
    tokens: list[str] = []
    for token in pointer[1:].split("/"):
        if re.search(r"~(?![01])", token) is not None:
            return None
        tokens.append(token.replace("~1", "/").replace("~0", "~"))
    return tokens


def _escape(key: str) -> str:
    return "/" + key.replace("~", "~0").replace("/", "~1")


def _copy_path(source: dict[str, Any], target: dict[str, Any], tokens: list[str]) -> None:
    """Copy the value ``tokens`` address in ``source`` into ``target``; arrays are never traversed."""
    node: Any = source
    for token in tokens:
        if not isinstance(node, dict) or token not in node:
            return
        node = node[token]
    out = target
    for token in tokens[:-1]:
        child = out.get(token)
        if child is None:
            child = out[token] = {}
        elif not isinstance(child, dict):  # pragma: no cover - only a non-object could be here
            return
        out = child
    out[tokens[-1]] = node


def redact_record(record: dict[str, Any], allowlist: Sequence[str] | None) -> tuple[dict[str, Any], list[str]]:
    """Redact ``record`` by omission (DESIGN D12).

    ``allowlist`` holds JSON pointers (``None`` = the whole record; ``""`` = the whole record;
    pointers through arrays or to missing paths are ignored). ``record_id`` is always kept.
    Returns the redacted record and the removed top-level fields as sorted escaped pointers.
    """
    if allowlist is None:
        redacted = dict(record)
    else:
        redacted = {}
        for pointer in sorted(allowlist, key=lambda p: (p != "", p)):
            tokens = _decode_pointer(pointer)
            if tokens is None:
                continue
            if not tokens:
                redacted.update(record)
                continue
            existing = redacted.get(tokens[0])
            if existing is not None and existing is record.get(tokens[0]):
                continue  # the whole top-level value is already included
            _copy_path(record, redacted, tokens)
    redacted["record_id"] = record["record_id"]
    removed = sorted(_escape(key) for key in record if key not in redacted)
    return redacted, removed
