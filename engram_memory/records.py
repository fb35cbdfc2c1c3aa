"""Construction of completed payloads, records, trust and receipts, and the sealing contexts.

Each function canonicalises its value once; every digest here uses a named
:class:`~engram_memory.canonical.Domain`.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

from engram_memory.canonical import (
    Domain,
    canonical_bytes,
    canonical_plain,
    digest,
    digest_bytes,
    epoch_ms,
    parse_instant,
    receipt_digest,
    record_id_from_digest,
)
from engram_memory.context import HostBinding
from engram_memory.ports import Policy, RecordRow

__all__ = [
    "authorization_for",
    "authorization_receipt",
    "build_record",
    "candidate_context",
    "candidate_id_for",
    "complete_payload",
    "record_context",
    "record_forms",
    "rederived",
    "transaction_receipt",
    "trust_binding",
]

DEFAULT_RETENTION = {"derivative_rule": "make-ineligible"}
_ID_KEYS = ("record_digest", "record_id")
_ID_PREFIXES = {key: canonical_bytes(key) + b":" for key in _ID_KEYS}


def candidate_context(scope: str, candidate_id: str) -> str:
    """Associated data binding a pending envelope to its scope and candidate id."""
    return digest(Domain.PENDING_CONTEXT, {"scope_ref": scope, "candidate_id": candidate_id})


def record_context(scope: str, record_id: str) -> str:
    """Associated data binding a record body to its scope and record id."""
    return digest(Domain.RECORD_CONTEXT, {"scope_ref": scope, "record_id": record_id})


def candidate_id_for(scope: str, principal: str, idempotency_key: str) -> str:
    """``candidate_`` + 64 hex: deterministic per (scope, principal, idempotency key)."""
    identity = digest(
        Domain.CAPTURE_IDENTITY,
        {"scope_ref": scope, "principal": principal, "idempotency_key": idempotency_key},
    )
    return "candidate_" + identity.removeprefix("sha256:")


def _payload_defaults() -> dict[str, Any]:
    """The payload members a capture may omit, each with the value an omitted one has (fresh objects)."""
    return {"retention": dict(DEFAULT_RETENTION), "reconciliation": {"family_refs": []}}


_NO_DEFAULT: Final = object()


def complete_payload(payload: dict[str, Any], scope: str) -> dict[str, Any]:
    """The payload as digested and stored: scope injected, retention and reconciliation defaulted."""
    completed = {**_payload_defaults(), **payload}
    completed["scope_ref"] = scope
    return completed


def without_spelled_out_defaults(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with a ``retention`` or ``reconciliation`` equal to its default left out, as if omitted.

    An omitted member and its default spelled out are the same content (one payload digest): a
    capture's idempotency intent counts them as one.
    """
    defaults = _payload_defaults()
    return {name: value for name, value in payload.items() if defaults.get(name, _NO_DEFAULT) != value}


def authorization_receipt(
    *,
    tool: str,
    scope: str,
    principal: str,
    agent_id: str,
    session: str,
    purpose_ref: str,
    target: str,
    policy_id: str,
    policy_version: str,
    checked_at: str,
) -> str:
    """Digest of the host-bound authorization under which an operation ran."""
    return digest(
        Domain.AUTHORIZATION,
        {
            "tool": tool,
            "scope_ref": scope,
            "principal": principal,
            "agent_id": agent_id,
            "session": session,
            "purpose_ref": purpose_ref,
            "target": target,
            "policy_id": policy_id,
            "policy_version": policy_version,
            "checked_at": checked_at,
        },
    )


def authorization_for(*, tool: str, binding: HostBinding, policy: Policy, target: str, checked_at: str) -> str:
    """:func:`authorization_receipt` of a call made under ``binding`` and ``policy``."""
    return authorization_receipt(
        tool=tool,
        scope=binding.scope,
        principal=binding.principal,
        agent_id=binding.agent_id,
        session=binding.session,
        purpose_ref=binding.purpose_ref,
        target=target,
        policy_id=policy.policy_id,
        policy_version=policy.policy_version,
        checked_at=checked_at,
    )


def trust_binding(
    *, trust_class: str, evidence_digest: str, policy_id: str, policy_version: str, issued_at: str, payload_digest: str
) -> dict[str, Any]:
    """The host-assigned trust of a capture, with its receipt digest (bound to the payload)."""
    body = {
        "class": trust_class,
        "evidence_digest": evidence_digest,
        "verifier_id": policy_id,
        "verifier_version": policy_version,
        "issued_at": issued_at,
        "revocation_epoch": "0",
    }
    body["receipt_digest"] = digest(Domain.ASSERTED_TRUST, {**body, "payload_digest": payload_digest})
    return body


def build_record(
    *,
    completed: dict[str, Any],
    payload_digest: str,
    recorded_at: str,
    recorded_cursor: str,
    authorization_receipt_digest: str,
    trust: dict[str, Any],
) -> dict[str, Any]:
    """The accepted record: payload fields plus provenance, ``record_digest`` and ``record_id``.

    ``record_digest`` hashes the record without ``record_id`` and ``record_digest``.
    """
    record = {
        **completed,
        "payload_digest": payload_digest,
        "recorded_at": recorded_at,
        "recorded_cursor": recorded_cursor,
        "authorization_receipt_digest": authorization_receipt_digest,
        "trust": trust,
    }
    record_digest = digest(Domain.RECORD, record)
    record["record_digest"] = record_digest
    record["record_id"] = record_id_from_digest(record_digest)
    return record


def transaction_receipt(
    *, operation: str, scope: str, cursor: str, event_digest: str, committed_at: str, record_digest: str | None = None
) -> str:
    """Digest binding a committed unit of work to its event and time."""
    body: dict[str, Any] = {
        "operation": operation,
        "scope_ref": scope,
        "cursor": cursor,
        "event_digest": event_digest,
        "committed_at": committed_at,
    }
    if record_digest is not None:
        body["record_digest"] = record_digest
    return receipt_digest(Domain.TRANSACTION, body)


def record_forms(record: dict[str, Any], *, plain: bool = False) -> tuple[bytes, bytes]:
    """Canonical bytes of ``record`` without ``record_id`` and ``record_digest``, and of all of it.

    The first is what ``record_digest`` hashes (see :func:`build_record`); the second is
    ``canonical_bytes(record)``. With ASCII keys the two id members are adjacent in the whole
    record's bytes: the first form is the second without them when their bytes occur exactly once;
    otherwise the members sorting below and above them are canonicalised once each and joined both
    ways. ``plain``: ``record`` is known plain (:func:`~engram_memory.canonical.parse_plain`), so
    it is encoded without a scan.

    Raises:
        CanonicalError: ``record`` has no canonical form.
    """
    encode = canonical_plain if plain else canonical_bytes
    if not _ascii_keys_with_adjacent_ids(record):
        others = {key: item for key, item in record.items() if key not in _ID_KEYS}
        return canonical_bytes(others), canonical_bytes(record)
    ids = b",".join([_ID_PREFIXES[key] + encode(record[key]) for key in _ID_KEYS if key in record])
    if ids:
        whole = encode(record)
        rest = _without_once(whole, ids)
        if rest is not None:
            return rest, whole
    low = {key: item for key, item in record.items() if key < _ID_KEYS[0]}
    high = {key: item for key, item in record.items() if key > _ID_KEYS[1]}
    parts = [encode(part)[1:-1] for part in (low, high) if part]
    joined = [*parts[:1], ids, *parts[1:]] if low else [ids, *parts]
    return b"{" + b",".join(parts) + b"}", b"{" + b",".join(part for part in joined if part) + b"}"


def _ascii_keys_with_adjacent_ids(record: dict[Any, Any]) -> bool:
    """Whether every key is an ASCII ``str`` and none sorts between the two id keys."""
    if set(map(type, record)) - {str} or not "".join(record).isascii():
        return False
    keys = sorted(record)
    after = bisect.bisect_right(keys, _ID_KEYS[0])
    return after == len(keys) or keys[after] >= _ID_KEYS[1]


def _without_once(whole: bytes, members: bytes) -> bytes | None:
    """``whole`` (canonical object bytes) without ``members`` and one separator, if they occur once."""
    start = whole.find(members)
    if start < 0 or whole.find(members, start + 1) >= 0:
        return None
    end = start + len(members)
    if whole[start - 1 : start] == b",":
        return whole[: start - 1] + whole[end:]
    if whole[end : end + 1] == b",":
        return whole[:start] + whole[end + 1 :]
    return whole[:start] + whole[end:]


def rederived(record: Any, row: RecordRow, *, plain: bool = False) -> bytes | None:
    """The canonical bytes of an opened record body if it re-derives ``row``, else ``None``.

    The body must carry the row's ``record_id`` and ``record_digest``, hash to that digest, and
    hold the row's ``payload_digest`` and eligibility times (``valid_time`` and the retention
    expiry), so a row edited on disk can never make readable what its sealed body does not say.
    ``plain``: as for :func:`record_forms`.

    Raises:
        CanonicalError: the body has no canonical form.
    """
    if not (
        isinstance(record, dict)
        and record.get("record_id") == row.record_id
        and record.get("record_digest") == row.record_digest
        and record.get("payload_digest") == row.payload_digest
        and _holds_row_times(record, row)
    ):
        return None
    rest, whole = record_forms(record, plain=plain)
    return whole if digest_bytes(Domain.RECORD, rest) == row.record_digest else None


def _holds_row_times(record: dict[str, Any], row: RecordRow) -> bool:
    """Whether the body's ``valid_time`` and retention expiry are the row's eligibility times."""
    valid_time, retention = record.get("valid_time"), record.get("retention")
    if not (isinstance(valid_time, dict) and isinstance(retention, dict)):
        return False
    expires_at = retention.get("expires_at")
    try:
        expires_ms = None if expires_at is None else epoch_ms(parse_instant(expires_at))
    except ValueError:
        return False
    return (
        valid_time.get("t") == row.valid_from
        and valid_time.get("t_end") == row.valid_to
        and expires_ms == row.expires_at_ms
    )
