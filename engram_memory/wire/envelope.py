"""The result envelope and its MCP carriage, as plain dicts (no SDK types).

Success: ``{ok: true, output: {schema_version: 1, value}, auditId, redactionClass: "high"}``.
Failure: ``{ok: false, auditId, redactionClass: "high", error: {code, message, retriable}}``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from engram_memory.errors import EngramError

__all__ = [
    "OUTPUT_SCHEMA_VERSION",
    "REDACTION_CLASS",
    "failure_envelope",
    "success_envelope",
    "to_envelope",
    "to_mcp_call_result",
]

OUTPUT_SCHEMA_VERSION: Final = 1
REDACTION_CLASS: Final = "high"


def success_envelope(value: dict[str, Any], audit_id: str) -> dict[str, Any]:
    """Wrap a tool output value in the success envelope."""
    return {
        "ok": True,
        "output": {"schema_version": OUTPUT_SCHEMA_VERSION, "value": value},
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
    }


def failure_envelope(error: EngramError, audit_id: str) -> dict[str, Any]:
    """Wrap an :class:`EngramError` in the failure envelope (constant message, table retriable)."""
    return {
        "ok": False,
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
        "error": {
            "code": error.code.value,
            "message": error.public_message,
            "retriable": error.retriable,
        },
    }


def to_envelope(result: dict[str, Any] | EngramError, audit_id: str) -> dict[str, Any]:
    """Build the envelope for a tool output value or a memory-level error."""
    if isinstance(result, EngramError):
        return failure_envelope(result, audit_id)
    return success_envelope(result, audit_id)


def to_mcp_call_result(envelope: dict[str, Any]) -> dict[str, Any]:
    """Carry an envelope as an MCP ``CallToolResult`` dict.

    ``structuredContent`` is the envelope, ``content`` holds one text item whose JSON parses back
    to exactly the same value, and ``isError == not ok``.
    """
    text = json.dumps(envelope, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return {
        "structuredContent": envelope,
        "content": [{"type": "text", "text": text}],
        "isError": not envelope["ok"],
    }
