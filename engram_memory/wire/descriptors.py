"""MCP-style tool descriptors of the six tools, as plain dicts (no SDK types).

Each descriptor is ``{name, title, description, inputSchema, outputSchema, annotations}``: the
description is written for the agent (when to use the tool, when not, what the outcome means, the
key errors and what to do), ``inputSchema`` is the closed input schema and ``outputSchema`` the
schema of the whole result envelope. A host hands the agent only the tools it granted.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any, Final

from engram_memory.wire.converter import TOOL_NAMES
from engram_memory.wire.schemas import input_schema, output_envelope_schema

__all__ = ["TOOL_ANNOTATIONS", "TOOL_DESCRIPTIONS", "TOOL_TITLES", "tool_descriptors"]

TOOL_TITLES: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "engram_memory_search": "Search memory",
        "engram_memory_get": "Get a memory record",
        "engram_memory_capture": "Capture a memory candidate",
        "engram_memory_request_admission": "Request admission of a candidate",
        "engram_memory_withdraw": "Withdraw a pending candidate",
        "engram_memory_forget": "Forget a memory record",
    }
)

TOOL_DESCRIPTIONS: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "engram_memory_search": (
            "Find current, admitted memory records relevant to a query, each with its citations, "
            "the list of redacted fields and a rank receipt. Use it before any capture and whenever "
            "durable knowledge from earlier sessions (decisions, verified facts, conventions, known "
            "pitfalls) could help; it returns only accepted_current records, never pending "
            "candidates. An empty records list means nothing matched; for the next page repeat the "
            "same call with page_cursor set to next_page_cursor. On STALE_PAGE search again without "
            "page_cursor; on RANKING_UNAVAILABLE retry later or ask for lexical only; on "
            "RESULT_TOO_LARGE or PROJECTION_OVERSIZED lower limit or adjust max_packet_bytes."
        ),
        "engram_memory_get": (
            "Read one known current record by its record_id (copied exactly from a search result or "
            "an accepted admission), without ranking. Use search to discover records; a "
            "candidate_id is not a record_id, and pending candidates cannot be read. The result is "
            "the redacted record with a read receipt stating as of when it was validated. NOT_FOUND "
            "means unknown, out of scope or no longer current (indistinguishable by design): treat "
            "the record as unavailable and do not probe; on PROJECTION_OVERSIZED adjust "
            "max_packet_bytes."
        ),
        "engram_memory_capture": (
            "Submit durable, reusable knowledge (a grounded decision, a verified fact, a "
            "convention, a recurring pitfall and its fix) as a pending candidate. Search first: if "
            "an equivalent current record exists, cite its record_id instead; never capture "
            "scratch notes, chat history, raw tool output, speculation, or any secret, credential, "
            "token, API or signing key, password, connection string, .env value or session cookie. "
            "Every component must cite a source, with the sha256 digest of "
            "the cited content; omit retention unless told otherwise, and reuse the "
            "idempotency_key only to retry the same capture. The candidate stays pending and "
            "encrypted, unsearchable and unreadable until request_admission accepts it: "
            "committed_pending is a new candidate, duplicate_exact a replay of the same key and "
            "content. On INVALID_SCHEMA or INVALID_DIGEST fix the arguments; on "
            "MUTATION_OUTCOME_UNKNOWN retry with the same key and arguments; on DIGEST_CONFLICT do "
            "not reuse the key for other content; on UNAUTHORIZED stop and report."
        ),
        "engram_memory_request_admission": (
            "Ask the host's admission policy to decide a pending candidate, by the candidate_id "
            "capture returned. You cannot supply or influence the decision: report outcome.status "
            "exactly (accepted gives the record_id of the now current record; rejected and "
            "pending_adjudication are outcomes, not errors) and read replayed rather than the "
            "presence of fields. Never alter or paraphrase forgotten content to get it admitted. "
            "Reuse the idempotency_key only to retry: on POLICY_STALE or MUTATION_OUTCOME_UNKNOWN "
            "retry with the same key and arguments; on NOT_FOUND treat the candidate as "
            "unavailable; on DIGEST_CONFLICT do not reuse the key."
        ),
        "engram_memory_withdraw": (
            "End a pending candidate that should not be admitted, by its candidate_id, with a "
            "reason_ref; for an admitted record use forget instead. It is destructive and needs a "
            "human confirmation obtained by the host; you cannot confirm it yourself. Success "
            "moves the candidate from pending to withdrawn and destroys its encryption key "
            "(key_destruction: complete, or pending while scheduled). On gate_failed ask the human "
            "through the host; on NOT_FOUND treat the candidate as unavailable; on "
            "MUTATION_OUTCOME_UNKNOWN retry with the same key and arguments; on DIGEST_CONFLICT do "
            "not reuse the key."
        ),
        "engram_memory_forget": (
            "Make an admitted record finally ineligible (tombstoned), by its record_id, with a "
            "reason_ref, when it is wrong or must be erased; for a pending candidate use withdraw "
            "instead. It is destructive, irreversible, and needs a human confirmation obtained by "
            "the host; you cannot confirm it yourself. Success moves the record to tombstoned; "
            "projection_invalidation says whether every index is already purged, and the same "
            "content captured again is held for adjudication rather than admitted. On gate_failed "
            "ask the human through the host; on NOT_FOUND treat the record as unavailable; on "
            "MUTATION_OUTCOME_UNKNOWN retry with the same key and arguments; on DIGEST_CONFLICT do "
            "not reuse the key."
        ),
    }
)


def _hints(*, read_only: bool, destructive: bool, idempotent: bool) -> Mapping[str, bool]:
    return types.MappingProxyType(
        {
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": False,
        }
    )


_READ: Final = _hints(read_only=True, destructive=False, idempotent=True)
_KEYED_WRITE: Final = _hints(read_only=False, destructive=False, idempotent=True)
_DESTRUCTIVE: Final = _hints(read_only=False, destructive=True, idempotent=True)

TOOL_ANNOTATIONS: Final[Mapping[str, Mapping[str, bool]]] = types.MappingProxyType(
    {
        "engram_memory_search": _READ,
        "engram_memory_get": _READ,
        "engram_memory_capture": _KEYED_WRITE,
        "engram_memory_request_admission": _KEYED_WRITE,
        "engram_memory_withdraw": _DESTRUCTIVE,
        "engram_memory_forget": _DESTRUCTIVE,
    }
)
"""MCP tool annotations: mutations are idempotent through their idempotency key."""


def _descriptor(tool: str) -> dict[str, Any]:
    return {
        "name": tool,
        "title": TOOL_TITLES[tool],
        "description": TOOL_DESCRIPTIONS[tool],
        "inputSchema": input_schema(tool),
        "outputSchema": output_envelope_schema(tool),
        "annotations": dict(TOOL_ANNOTATIONS[tool]),
    }


def tool_descriptors(tools: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Descriptors of ``tools`` (default: all six), in contract order, as fresh dicts.

    Args:
        tools: the tool names to describe (for example the ones the host granted); order and
            repetitions do not matter. ``None`` means all six.

    Raises:
        KeyError: a name is not one of the six tools.
        TypeError: ``tools`` is a single string instead of an iterable of names.
    """
    if isinstance(tools, str):
        raise TypeError("tools must be an iterable of tool names, not a single string")
    wanted = set(TOOL_NAMES if tools is None else tools)
    unknown = sorted(wanted.difference(TOOL_NAMES))
    if unknown:
        raise KeyError(unknown[0])
    return [_descriptor(tool) for tool in TOOL_NAMES if tool in wanted]
