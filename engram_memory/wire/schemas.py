"""Closed JSON Schemas (draft 2020-12) of the six tools: inputs, output values and envelopes.

The input schemas mirror :mod:`engram_memory.wire.args` field for field; the strict parser
(:func:`engram_memory.wire.parse_args`) stays authoritative. Every object node is closed
(``additionalProperties: false``) and every bound of the contract is written down.

JSON Schema counts characters (code points), the contract counts UTF-8 bytes, so every
byte-bounded string carries:

* ``minLength`` / ``maxLength`` chosen as *necessary* conditions: a string of ``L..H`` UTF-8 bytes
  has at least ``ceil(L / 4)`` and at most ``H`` code points. Free text is bounded *after* NFC
  normalisation, and NFC can compose up to three code points into one two-byte character (``U`` +
  U+0308 + U+0304 becomes U+01D5), so its raw ``maxLength`` is ``floor(1.5 * H)``;
* the vendor annotation ``"x-utf8-bytes": {"min": L, "max": H}``, the exact byte bound;
* the vendor annotation ``"x-nfc"``: ``"required"`` (opaque refs and idempotency keys must already
  be NFC) or ``"normalise"`` (free text is NFC-normalised and the byte bound applies to the
  normalised text; the attestation is free text). Values copied verbatim (``candidate_id``,
  ``page_cursor``) carry no ``x-nfc``: they are used, and their byte bound measured, as sent.

Rules JSON Schema cannot express (cross-references of a capture, the strict order of
``family_refs``, ``t_end >= t``, the 1,048,576-byte cap on the serialised arguments, real calendar
instants) are written as ``"x-engram-rules"`` strings, ``"x-engram-format"`` (``"instant"``: the
text must also name a real moment; ``"cursor"``: at most 2**64 - 1) and
``"x-max-argument-bytes"``; the parser enforces all of them.

The public mappings and functions hand out deep copies, so callers cannot alter the shared
definitions.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Final

from engram_memory.canonical import MAX_SAFE_INTEGER
from engram_memory.errors import ErrorCode
from engram_memory.wire import limits as lim
from engram_memory.wire.converter import TOOL_NAMES

__all__ = [
    "CURSOR_PATTERN",
    "DIGEST_PATTERN",
    "DRAFT_2020_12",
    "ENVELOPE_SCHEMAS",
    "INPUT_SCHEMAS",
    "INSTANT_PATTERN",
    "NFC_CHARS_PER_BYTE",
    "OUTPUT_SCHEMAS",
    "RECORD_ID_PATTERN",
    "X_ENGRAM_FORMAT",
    "X_ENGRAM_RULES",
    "X_MAX_ARGUMENT_BYTES",
    "X_NFC",
    "X_UTF8_BYTES",
    "input_schema",
    "output_envelope_schema",
    "output_schema",
]

Schema = dict[str, Any]

DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
DIGEST_PATTERN: Final = r"^sha256:[0-9a-f]{64}$"
RECORD_ID_PATTERN: Final = lim.RECORD_ID_PATTERN
INSTANT_PATTERN: Final = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
CURSOR_PATTERN: Final = r"^(0|[1-9][0-9]*)$"
JSON_POINTER_PATTERN: Final = r"^(/([^~/]|~[01])*)+$"

X_UTF8_BYTES: Final = "x-utf8-bytes"
X_NFC: Final = "x-nfc"
X_ENGRAM_RULES: Final = "x-engram-rules"
X_ENGRAM_FORMAT: Final = "x-engram-format"
X_MAX_ARGUMENT_BYTES: Final = "x-max-argument-bytes"

NFC_CHARS_PER_BYTE: Final = 1.5
"""Most code points a raw string can have per UTF-8 byte of its NFC form (U+01D5 and kin)."""

_UTF8_MAX_BYTES_PER_CHAR: Final = 4
_CURSOR_MAX_DIGITS: Final = len(str(2**64 - 1))

# --------------------------------------------------------------------------- shared pieces


def _obj(
    properties: Mapping[str, Schema],
    *,
    description: str,
    optional: Collection[str] = (),
    required: Sequence[str] | None = None,
    rules: Sequence[str] = (),
) -> Schema:
    """A closed object; every property is required unless listed in ``optional``."""
    names = list(properties)
    unknown = set(optional) - set(names)
    if unknown:  # pragma: no cover - a programming error in this module
        raise ValueError(f"optional names not in properties: {sorted(unknown)}")
    schema: Schema = {
        "type": "object",
        "description": description,
        "properties": dict(properties),
        "required": list(required) if required is not None else [n for n in names if n not in optional],
        "additionalProperties": False,
    }
    if rules:
        schema[X_ENGRAM_RULES] = list(rules)
    return schema


def _array(
    items: Schema,
    *,
    description: str,
    min_items: int = 0,
    max_items: int | None = None,
    unique: bool = False,
    rules: Sequence[str] = (),
) -> Schema:
    schema: Schema = {"type": "array", "description": description, "items": items}
    if min_items:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    if unique:
        schema["uniqueItems"] = True
    if rules:
        schema[X_ENGRAM_RULES] = list(rules)
    return schema


def _utf8_string(low: int, high: int, *, description: str, nfc: str | None, max_chars: int | None = None) -> Schema:
    """A byte-bounded string: necessary character bounds plus the exact byte annotation."""
    schema: Schema = {"type": "string", "description": description}
    min_chars = math.ceil(low / _UTF8_MAX_BYTES_PER_CHAR)
    if min_chars:
        schema["minLength"] = min_chars
    schema["maxLength"] = high if max_chars is None else max_chars
    schema[X_UTF8_BYTES] = {"min": low, "max": high}
    if nfc is not None:
        schema[X_NFC] = nfc
    return schema


def _ref(description: str) -> Schema:
    """An opaque ref: already NFC, 1..512 UTF-8 bytes."""
    return _utf8_string(
        *lim.OPAQUE_BYTES,
        description=f"{description} Opaque ref: an NFC string of 1-512 UTF-8 bytes.",
        nfc="required",
    )


def _verbatim(description: str) -> Schema:
    """A value copied exactly as returned earlier: 1..512 UTF-8 bytes, taken as sent."""
    return _utf8_string(
        *lim.OPAQUE_BYTES,
        description=f"{description} Copy it exactly as returned (1-512 UTF-8 bytes).",
        nfc=None,
    )


def _free_text(bounds: tuple[int, int], description: str) -> Schema:
    low, high = bounds
    return _utf8_string(
        low,
        high,
        description=(
            f"{description} Free text: NFC-normalised on receipt; the normalised text must be "
            f"{low}-{high:,} UTF-8 bytes."
        ),
        nfc="normalise",
        max_chars=math.floor(high * NFC_CHARS_PER_BYTE),
    )


def _idempotency_key() -> Schema:
    low, high = lim.IDEMPOTENCY_KEY_BYTES
    return _utf8_string(
        low,
        high,
        description=(
            f"One key per logical operation, chosen before the first attempt and reused unchanged "
            f"on every retry: an NFC string of {low}-{high} UTF-8 bytes (at least {low} ASCII "
            "characters, or fewer multi-byte ones). The same key with other arguments is DIGEST_CONFLICT."
        ),
        nfc="required",
    )


def _record_id(description: str) -> Schema:
    return {
        "type": "string",
        "description": f"{description} Copy it exactly as returned.",
        "pattern": RECORD_ID_PATTERN,
        "minLength": len("mem_") + 1,
        "maxLength": lim.OPAQUE_BYTES[1],
        X_UTF8_BYTES: {"min": len("mem_") + 1, "max": lim.OPAQUE_BYTES[1]},
    }


def _digest(description: str) -> Schema:
    return {
        "type": "string",
        "description": f"{description} Format: sha256: followed by 64 lower-case hex digits.",
        "pattern": DIGEST_PATTERN,
    }


def _instant(description: str) -> Schema:
    return {
        "type": "string",
        "description": (f"{description} Canonical UTC instant YYYY-MM-DDTHH:mm:ss.sssZ naming a real moment."),
        "format": "date-time",
        "pattern": INSTANT_PATTERN,
        X_ENGRAM_FORMAT: "instant",
    }


def _cursor(description: str) -> Schema:
    return {
        "type": "string",
        "description": f"{description} Journal cursor: canonical decimal, at most 2**64 - 1.",
        "pattern": CURSOR_PATTERN,
        "maxLength": _CURSOR_MAX_DIGITS,
        X_ENGRAM_FORMAT: "cursor",
    }


def _integer(description: str, *, minimum: int, maximum: int, default: int | None = None) -> Schema:
    schema: Schema = {
        "type": "integer",
        "description": description,
        "minimum": minimum,
        "maximum": maximum,
    }
    if default is not None:
        schema["default"] = default
    return schema


def _safe_integer(description: str) -> Schema:
    return _integer(
        f"{description} A safe integer (within +/-(2**53 - 1)).",
        minimum=-MAX_SAFE_INTEGER,
        maximum=MAX_SAFE_INTEGER,
    )


def _enum(description: str, *values: str, default: str | None = None) -> Schema:
    schema: Schema = {"type": "string", "description": description, "enum": list(values)}
    if default is not None:
        schema["default"] = default
    return schema


def _const(value: str | int, description: str) -> Schema:
    kind = "string" if isinstance(value, str) else "integer"
    return {"type": kind, "description": description, "const": value}


def _string(description: str) -> Schema:
    return {"type": "string", "description": description}


def _boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def _root(schema: Schema, title: str) -> Schema:
    return {"$schema": DRAFT_2020_12, "title": title, **schema}


def _argument_root(schema: Schema, title: str) -> Schema:
    out = _root(schema, title)
    out[X_MAX_ARGUMENT_BYTES] = lim.MAX_ARGUMENT_BYTES
    out[X_ENGRAM_RULES] = [
        *out.get(X_ENGRAM_RULES, []),
        (
            "The serialised arguments (their compact JSON text in UTF-8) are at most "
            f"{lim.MAX_ARGUMENT_BYTES:,} bytes, both as sent and once their texts are in NFC."
        ),
        "Numbers: -0, NaN and Infinity are refused; an integral number such as 10.0 is the integer 10.",
    ]
    return out


def _packet_bytes(description: str) -> Schema:
    low, high = lim.PACKET_BYTES_RANGE
    return _integer(
        description,
        minimum=low,
        maximum=high,
        default=lim.PACKET_BYTES_DEFAULT,
    )


_PURPOSE_DESCRIPTION: Final = "Must equal the purpose the host bound for this session."

# --------------------------------------------------------------------------- payload pieces


def _valid_time() -> Schema:
    return _obj(
        {
            "t": _safe_integer("Start of validity, epoch milliseconds."),
            "t_end": _safe_integer("End of validity (inclusive), epoch milliseconds; omit = open."),
        },
        optional=("t_end",),
        description="When the knowledge holds: the closed interval [t, t_end] in epoch ms.",
        rules=["t_end, when present, is greater than or equal to t."],
    )


def _component() -> Schema:
    return _obj(
        {
            "component_id": _ref("Identifier of this component, unique within the payload."),
            "kind": _enum("What the component states.", "context", "decision", "evidence"),
            "text": _free_text(lim.TEXT_BYTES, "The component's content."),
            "citation_ids": _array(
                _ref("A citation_id of payload.citations."),
                description="The citations supporting this component; each must resolve.",
                min_items=1,
                max_items=lim.LIST_MAX,
                unique=True,
                rules=["Every item resolves to a citations[*].citation_id of the payload."],
            ),
        },
        description="One cited statement of the payload.",
    )


def _components() -> Schema:
    return _array(
        _component(),
        description="The cited statements of the payload.",
        min_items=1,
        max_items=lim.COMPONENTS_MAX,
        unique=True,
        rules=["component_id values are unique."],
    )


def _primary_event() -> Schema:
    return _obj(
        {
            "at": _safe_integer("When the event happened (epoch milliseconds)."),
            "type_ref": _ref("What kind of event it is."),
            "citation_id": _ref("The citation that grounds the event."),
        },
        description="The event the payload is primarily about.",
        rules=[
            "citation_id resolves in payload.citations and is cited by the primary component.",
        ],
    )


def _locator() -> Schema:
    return _obj(
        {
            "scheme": _ref("How to read value (for example a line range or a URL fragment)."),
            "value": _ref("Where the cited content sits inside the source."),
        },
        description="Where inside the source the cited content sits.",
    )


def _citation() -> Schema:
    return _obj(
        {
            "citation_id": _ref("Identifier of this citation, unique within the payload."),
            "source_ref": _ref("The cited source."),
            "locator": _locator(),
            "content_digest": _digest("Digest of the cited content."),
            "observed_at": _instant("When the cited content was observed."),
        },
        optional=("observed_at",),
        description="A cited source; it remains a claim until a host verifier checks it.",
    )


def _citations() -> Schema:
    return _array(
        _citation(),
        description="The sources cited by the components.",
        min_items=1,
        max_items=lim.LIST_MAX,
        unique=True,
        rules=["citation_id values are unique."],
    )


def _retention() -> Schema:
    return _obj(
        {
            "derivative_rule": _enum(
                "What happens to derivatives; retain needs explicit host permission.",
                "retain",
                "make-ineligible",
            ),
            "expires_at": _instant("Expiry of the record."),
        },
        optional=("expires_at",),
        description="Omit unless told otherwise (default: make-ineligible, no expiry).",
        rules=[
            (
                "expires_at is after the capture time (else INVALID_SCHEMA) and within the host's "
                "cap (else UNAUTHORIZED)."
            ),
        ],
    )


def _reconciliation() -> Schema:
    return _obj(
        {
            "family_refs": _array(
                _ref("A reconciliation family."),
                description="Reconciliation families; an empty list opts out.",
                max_items=lim.FAMILY_REFS_MAX,
                unique=True,
                rules=[
                    "Items are strictly ascending in UTF-16 code-unit order (sorted and unique).",
                ],
            ),
        },
        description="Reconciliation families; each family needs host consent.",
    )


_PAYLOAD_RULES: Final = (
    "citations[*].citation_id values are unique.",
    "components[*].component_id values are unique.",
    "Every components[*].citation_ids item resolves to a citations[*].citation_id.",
    "primary_component_id resolves to a components[*].component_id.",
    "primary_event.citation_id resolves in citations and is cited by the primary component.",
)


def _payload() -> Schema:
    return _obj(
        {
            "schema_version": _const(2, "Payload schema version: always 2."),
            "purpose_ref": _ref(_PURPOSE_DESCRIPTION),
            "valid_time": _valid_time(),
            "components": _components(),
            "primary_component_id": _ref("The component_id of the main component."),
            "primary_event": _primary_event(),
            "citations": _citations(),
            "retention": _retention(),
            "reconciliation": _reconciliation(),
        },
        optional=("retention", "reconciliation"),
        description="The knowledge to remember, with its citations and their cross-references.",
        rules=_PAYLOAD_RULES,
    )


def _evidence() -> Schema:
    return _obj(
        {
            "evidence_ref": _ref("The evidence bundle backing the capture."),
            "evidence_digest": _digest("Digest of the evidence bundle."),
            "citation_ids": _array(
                _ref("A citation_id of payload.citations."),
                description="The payload citations the evidence covers.",
                min_items=1,
                max_items=lim.LIST_MAX,
                unique=True,
                rules=["Every item resolves to a payload.citations[*].citation_id."],
            ),
            "attestation": _free_text(
                (0, lim.ATTESTATION_MAX_BYTES), "Optional attestation text; it is a claim, never proof."
            ),
        },
        optional=("attestation",),
        description="The evidence of the capture; it remains a claim until a host verifier checks it.",
        rules=["Every citation_ids item resolves to a payload.citations[*].citation_id."],
    )


# --------------------------------------------------------------------------- input schemas


def _search_input() -> Schema:
    return _obj(
        {
            "query": _free_text(lim.QUERY_BYTES, "What to look for."),
            "purpose_ref": _ref(_PURPOSE_DESCRIPTION),
            "limit": _integer(
                "Most records per page.",
                minimum=lim.LIMIT_RANGE[0],
                maximum=lim.LIMIT_RANGE[1],
                default=lim.LIMIT_DEFAULT,
            ),
            "max_packet_bytes": _packet_bytes(
                "Byte budget for the page's records together (their canonical JSON); a page stops "
                "before the record that would exceed it. Raise it on PROJECTION_OVERSIZED."
            ),
            "capability_policy": {
                **_obj(
                    {
                        "minimum_channels": _enum(
                            "Ranking channels that must be available (no silent fallback).",
                            "lexical",
                            "lexical_and_semantic",
                            default="lexical",
                        ),
                        "network": _enum(
                            "Whether ranking may use the network; allow grants nothing by itself.",
                            "forbid",
                            "allow",
                            default="forbid",
                        ),
                    },
                    optional=("minimum_channels", "network"),
                    description="Which ranking channels the search requires.",
                ),
                "default": {"minimum_channels": "lexical", "network": "forbid"},
            },
            "page_cursor": _verbatim("A next_page_cursor from a previous search with the same query and parameters."),
        },
        optional=("limit", "max_packet_bytes", "capability_policy", "page_cursor"),
        description="Arguments of engram_memory_search.",
    )


def _get_input() -> Schema:
    return _obj(
        {
            "record_id": _record_id("The record to read."),
            "purpose_ref": _ref(_PURPOSE_DESCRIPTION),
            "max_packet_bytes": _packet_bytes(
                "Byte budget for the returned record (its canonical JSON). Raise it on PROJECTION_OVERSIZED."
            ),
        },
        optional=("max_packet_bytes",),
        description="Arguments of engram_memory_get.",
    )


def _capture_input() -> Schema:
    return _obj(
        {
            "idempotency_key": _idempotency_key(),
            "payload": _payload(),
            "evidence": _evidence(),
        },
        description="Arguments of engram_memory_capture.",
        rules=["Every evidence.citation_ids item resolves to a payload.citations[*].citation_id."],
    )


def _request_admission_input() -> Schema:
    return _obj(
        {
            "candidate_id": _verbatim("The candidate_id returned by capture."),
            "idempotency_key": _idempotency_key(),
        },
        description="Arguments of engram_memory_request_admission.",
    )


def _withdraw_input() -> Schema:
    return _obj(
        {
            "candidate_id": _verbatim("The pending candidate to withdraw."),
            "idempotency_key": _idempotency_key(),
            "reason_ref": _ref("Why the candidate is withdrawn."),
        },
        description="Arguments of engram_memory_withdraw.",
    )


def _forget_input() -> Schema:
    return _obj(
        {
            "record_id": _record_id("The admitted record to forget."),
            "idempotency_key": _idempotency_key(),
            "reason_ref": _ref("Why the record is forgotten."),
        },
        description="Arguments of engram_memory_forget.",
    )


# --------------------------------------------------------------------------- output pieces


def _trust() -> Schema:
    return _obj(
        {
            "class": _enum("Trust class assigned by the host.", "asserted", "earned", "signed"),
            "evidence_digest": _digest("Digest of the evidence the class rests on."),
            "verifier_id": _string("Verifier that assigned the class."),
            "verifier_version": _string("Version of the verifier."),
            "issued_at": _instant("When the class was assigned."),
            "revocation_epoch": _cursor("Revocation epoch the class was checked against."),
            "receipt_digest": _digest("Digest of this trust receipt."),
        },
        description="The trust class the host assigned; never chosen by the caller.",
    )


def _redactable(schema: Schema) -> Schema:
    """``schema`` with no member required in it or in the objects it holds (arrays are whole).

    Redaction may keep part of an object-valued record field (a pointer such as ``/trust/class``),
    so inside a redacted record an object's members are all optional. Arrays are never traversed
    by redaction: their items keep their own schemas.
    """
    if schema.get("type") != "object":
        return schema
    return {
        **schema,
        "properties": {name: _redactable(member) for name, member in schema["properties"].items()},
        "required": [],
    }


def _record() -> Schema:
    properties: dict[str, Schema] = {
        "schema_version": _const(2, "Record schema version: always 2."),
        "scope_ref": _string("Opaque scope of the record."),
        "purpose_ref": _ref("Purpose the record was captured for."),
        "valid_time": _valid_time(),
        "components": _components(),
        "primary_component_id": _ref("The component_id of the main component."),
        "primary_event": _primary_event(),
        "citations": _citations(),
        "retention": _retention(),
        "reconciliation": _reconciliation(),
        "record_id": _record_id("Identifier of the record."),
        "payload_digest": _digest("Digest of the payload."),
        "record_digest": _digest("Digest of the record."),
        "recorded_at": _instant("When its candidate was captured (not when it was admitted)."),
        "recorded_cursor": _cursor("Journal position of its capture (not of its admission)."),
        "authorization_receipt_digest": _digest("Authorization of its capture."),
        "trust": _trust(),
    }
    return _obj(
        {name: _redactable(member) for name, member in properties.items()},
        required=("record_id",),
        description=(
            "An admitted record, redacted: any field except record_id may be removed (see "
            "redacted_fields), and any member of an object-valued field (valid_time, primary_event, "
            "retention, reconciliation, trust) when the host's allowlist keeps only part of it."
        ),
    )


def _redacted_fields() -> Schema:
    return _array(
        {
            "type": "string",
            "description": "JSON pointer of a removed field.",
            "format": "json-pointer",
            "pattern": JSON_POINTER_PATTERN,
        },
        description="JSON pointers of the fields removed from record.",
        unique=True,
        rules=["Items are sorted ascending."],
    )


def _rank_receipt() -> Schema:
    return _obj(
        {
            "request_digest": _digest("Digest of the search request."),
            "authorization_receipt_digest": _digest("Authorization of the search."),
            "profile": _string("Recall profile used."),
            "profile_version": _string("Version of the recall profile."),
            "profile_config_digest": _digest("Digest of the profile configuration."),
            "valid_as_of": _safe_integer("Valid time the search was pinned to (epoch ms)."),
            "system_as_of": _cursor("Journal position the search was pinned to."),
            "snapshot_id": _string("Snapshot the ranking read."),
            "snapshot_digest": _digest("Digest of the snapshot."),
            "candidate_count": _integer("Number of eligible candidates ranked.", minimum=0, maximum=MAX_SAFE_INTEGER),
            "candidate_ids_digest": _digest("Digest of the candidate ids."),
            "scoring_formula_ref": _string("Scoring formula used."),
            "ordered_ids_digest": _digest("Digest of the ordered ids."),
            "revalidation_receipt_digest": _digest("Revalidation of the authorization."),
            "projection_receipt_digests": _array(
                _digest("A projection receipt."),
                description="Receipts of the projections the ranking used.",
            ),
            "issued_at": _instant("When the receipt was issued."),
            "receipt_digest": _digest("Digest of this receipt."),
        },
        description="How the ranking was produced, for audit.",
    )


def _packet() -> Schema:
    return _obj(
        {
            "record": _record(),
            "redacted_fields": _redacted_fields(),
            "redaction_receipt_digest": _digest("Receipt of the redaction."),
            "score": {"type": "number", "description": "Ranking score."},
            "rank": _integer("Position in the ranking, from 1.", minimum=1, maximum=MAX_SAFE_INTEGER),
        },
        description="One ranked, redacted record.",
    )


def _search_output() -> Schema:
    return _obj(
        {
            "records": _array(
                _packet(),
                description="Matching current records, best first; empty means nothing matched.",
                max_items=lim.LIMIT_RANGE[1],
            ),
            "rank_receipt": _rank_receipt(),
            "next_page_cursor": _verbatim("Pass as page_cursor to fetch the next page."),
            "response_digest": _digest("Digest of this response."),
        },
        optional=("next_page_cursor",),
        description="Result of engram_memory_search.",
    )


def _get_output() -> Schema:
    return _obj(
        {
            "record": _record(),
            "redacted_fields": _redacted_fields(),
            "redaction_receipt_digest": _digest("Receipt of the redaction."),
            "read_receipt": _obj(
                {
                    "record_id": _record_id("The record read."),
                    "record_digest": _digest("Digest of the record read."),
                    "valid_as_of": _safe_integer("Valid time of the read (epoch ms)."),
                    "system_as_of": _cursor("Journal position of the read."),
                    "validated_through_cursor": _cursor("Position eligibility was checked up to."),
                    "authorization_receipt_digest": _digest("Authorization of the read."),
                    "revalidation_receipt_digest": _digest("Revalidation of the authorization."),
                    "checked_at": _instant("When eligibility was checked."),
                    "receipt_digest": _digest("Digest of this receipt."),
                },
                description="As of when, and under which authorization, the record was read.",
            ),
            "packet_digest": _digest("Digest of this packet."),
        },
        description="Result of engram_memory_get.",
    )


def _capture_output() -> Schema:
    return _obj(
        {
            "status": _enum(
                "committed_pending: a new pending candidate; duplicate_exact: a replay of the same key and content.",
                "committed_pending",
                "duplicate_exact",
            ),
            "candidate_id": _verbatim("The pending candidate (not a record_id)."),
            "record_digest": _digest("Digest the record would have if admitted."),
            "cursor": _cursor("Journal position of the capture."),
            "transaction_receipt_digest": _digest("Receipt of the transaction."),
        },
        optional=("record_digest",),
        description="Result of engram_memory_capture.",
    )


def _request_admission_output() -> Schema:
    return _obj(
        {
            "outcome": _obj(
                {
                    "status": _enum(
                        "The admission decision; rejected and pending_adjudication are outcomes, not errors.",
                        "accepted",
                        "rejected",
                        "pending_adjudication",
                        "duplicate_exact",
                    ),
                    "candidate_id": _verbatim("The candidate decided."),
                    "record_id": _record_id("The admitted record (set on accepted)."),
                    "cursor": _cursor("Journal position of the decision."),
                    "decision_receipt_digest": _digest("Receipt of the policy decision."),
                    "transaction_receipt_digest": _digest("Receipt of the transaction."),
                },
                optional=("record_id",),
                description="The decision; read status, not the presence of fields.",
            ),
            "replayed": _boolean("True when this answers a retry of an earlier request."),
        },
        description="Result of engram_memory_request_admission.",
    )


def _lifecycle_receipt(operation: str, from_state: Schema, to_state: str, description: str) -> Schema:
    return _obj(
        {
            "event_id": _string("Identifier of the lifecycle event."),
            "operation": _const(operation, "The lifecycle operation."),
            "from_state": from_state,
            "to_state": _const(to_state, "State after the event."),
            "cursor": _cursor("Journal position of the event."),
            "event_digest": _digest("Digest of the event."),
            "authorization_receipt_digest": _digest("Authorization of the event."),
            "transaction_receipt_digest": _digest("Receipt of the transaction."),
        },
        description=description,
    )


def _withdraw_output() -> Schema:
    return _obj(
        {
            "receipt": _lifecycle_receipt(
                "withdraw",
                _const("pending", "State before the event."),
                "withdrawn",
                "The withdrawal event.",
            ),
            "replayed": _boolean("True when this answers a retry of an earlier request."),
            "key_destruction": _enum(
                "Whether the candidate's data key is destroyed (complete) or scheduled (pending).",
                "pending",
                "complete",
            ),
        },
        description="Result of engram_memory_withdraw.",
    )


def _forget_output() -> Schema:
    return _obj(
        {
            "receipt": _lifecycle_receipt(
                "tombstone",
                _enum(
                    "State before the event.",
                    "accepted_current",
                    "accepted_disputed",
                    "historical",
                    "expired",
                    "trust_invalid",
                ),
                "tombstoned",
                "The tombstone event.",
            ),
            "replayed": _boolean("True when this answers a retry of an earlier request."),
            "projection_invalidation": _enum(
                "Whether every index is already purged (complete) or scheduled (pending).",
                "pending",
                "complete",
            ),
            "coverage_receipt_digest": _digest("Receipt of the erasure coverage."),
        },
        optional=("coverage_receipt_digest",),
        description="Result of engram_memory_forget.",
    )


# --------------------------------------------------------------------------- envelope


def _envelope(tool: str, value: Schema) -> Schema:
    value = {key: item for key, item in value.items() if key not in ("$schema", "title")}
    audit_id = _string("Host audit id of the call.")
    redaction = _const("high", "Redaction class of the result: always high.")
    success = _obj(
        {
            "ok": {"type": "boolean", "const": True, "description": "The call succeeded."},
            "output": _obj(
                {"schema_version": _const(1, "Output schema version: always 1."), "value": value},
                description="The versioned tool output.",
            ),
            "auditId": audit_id,
            "redactionClass": redaction,
        },
        description="Success envelope.",
    )
    failure = _obj(
        {
            "ok": {"type": "boolean", "const": False, "description": "The call failed."},
            "auditId": audit_id,
            "redactionClass": redaction,
            "error": _obj(
                {
                    "code": _enum(
                        "What went wrong; act on code and retriable only.",
                        *(code.value for code in ErrorCode),
                    ),
                    "message": _string("Constant, sanitised message; never act on it."),
                    "retriable": _boolean("Whether to retry after a back-off (mutations: same key and arguments)."),
                },
                description="The memory-level error.",
            ),
        },
        description="Failure envelope.",
    )
    root = _obj(
        {
            "ok": _boolean("True on success (output present), false on failure (error present)."),
            "output": {"description": "Present when ok is true; see the success branch."},
            "auditId": audit_id,
            "redactionClass": redaction,
            "error": {"description": "Present when ok is false; see the failure branch."},
        },
        optional=("output", "error"),
        description=f"Result envelope of {tool}: success or failure.",
    )
    root["oneOf"] = [success, failure]
    return _root(root, f"{tool} result")


# --------------------------------------------------------------------------- registries

_INPUT_BUILDERS: Final = (
    _search_input,
    _get_input,
    _capture_input,
    _request_admission_input,
    _withdraw_input,
    _forget_input,
)
_OUTPUT_BUILDERS: Final = (
    _search_output,
    _get_output,
    _capture_output,
    _request_admission_output,
    _withdraw_output,
    _forget_output,
)

_INPUT: Final[dict[str, Schema]] = {
    tool: _argument_root(build(), f"{tool} arguments") for tool, build in zip(TOOL_NAMES, _INPUT_BUILDERS, strict=True)
}
_OUTPUT: Final[dict[str, Schema]] = {
    tool: _root(build(), f"{tool} output value") for tool, build in zip(TOOL_NAMES, _OUTPUT_BUILDERS, strict=True)
}
_ENVELOPE: Final[dict[str, Schema]] = {tool: _envelope(tool, _OUTPUT[tool]) for tool in TOOL_NAMES}


class _CopyingMapping(Mapping[str, Schema]):
    """A read-only mapping that hands out a deep copy of each schema on every access."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Schema]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Schema:
        return copy.deepcopy(self._data[key])

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"<schemas of {', '.join(self._data)}>"


INPUT_SCHEMAS: Final[Mapping[str, Schema]] = _CopyingMapping(_INPUT)
"""Input schema of each tool, in contract order (every lookup returns a fresh copy)."""
OUTPUT_SCHEMAS: Final[Mapping[str, Schema]] = _CopyingMapping(_OUTPUT)
"""Schema of the success ``value`` of each tool (every lookup returns a fresh copy)."""
ENVELOPE_SCHEMAS: Final[Mapping[str, Schema]] = _CopyingMapping(_ENVELOPE)
"""Schema of the whole result envelope of each tool (every lookup returns a fresh copy)."""


def input_schema(tool: str) -> Schema:
    """A deep copy of the closed input schema of ``tool``.

    Raises:
        KeyError: ``tool`` is not one of the six tools.
    """
    return INPUT_SCHEMAS[tool]


def output_schema(tool: str) -> Schema:
    """A deep copy of the schema of ``tool``'s success ``value``.

    Raises:
        KeyError: ``tool`` is not one of the six tools.
    """
    return OUTPUT_SCHEMAS[tool]


def output_envelope_schema(tool: str) -> Schema:
    """A deep copy of the schema of ``tool``'s whole result envelope (success or failure).

    Raises:
        KeyError: ``tool`` is not one of the six tools.
    """
    return ENVELOPE_SCHEMAS[tool]
