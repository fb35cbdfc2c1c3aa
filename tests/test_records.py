"""Record and candidate contexts, payload completion, trust, record bodies and their re-derivation.

Expected values are literals: canonical bytes are spelled out and digests are ``hashlib.sha256``
over the literal domain string and those bytes.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from engram_memory.ports import RecordRow
from engram_memory.records import (
    DEFAULT_RETENTION,
    build_record,
    candidate_context,
    candidate_id_for,
    complete_payload,
    record_context,
    record_forms,
    rederived,
    trust_binding,
)

SCOPE = "scope-1"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64


def _sha(domain: str, body: bytes) -> str:
    return "sha256:" + hashlib.sha256(domain.encode() + body).hexdigest()


def _mem_id(record_digest: str) -> str:
    raw = bytes.fromhex(record_digest.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode().rstrip("=").lower()


def test_candidate_context_digests_scope_and_candidate_id() -> None:
    expected = _sha("graphify-memory/pending-context/v1\0", b'{"candidate_id":"candidate_abc","scope_ref":"scope-1"}')
    assert candidate_context(SCOPE, "candidate_abc") == expected
    assert candidate_context("scope-2", "candidate_abc") != expected


def test_record_context_digests_scope_and_record_id() -> None:
    expected = _sha("engram-memory/record-context/v1\0", b'{"record_id":"mem_abc","scope_ref":"scope-1"}')
    assert record_context(SCOPE, "mem_abc") == expected


def test_candidate_id_is_the_capture_identity_hex() -> None:
    identity = _sha(
        "graphify-memory/capture-identity/v1\0",
        b'{"idempotency_key":"key-000001","principal":"alice","scope_ref":"scope-1"}',
    )
    candidate_id = candidate_id_for(SCOPE, "alice", "key-000001")
    assert candidate_id == "candidate_" + identity.removeprefix("sha256:")
    assert len(candidate_id) == len("candidate_") + 64


def test_complete_payload_injects_scope_and_defaults() -> None:
    payload = {"scope_ref": "forged", "statement": "x"}
    completed = complete_payload(payload, SCOPE)
    assert completed == {
        "scope_ref": "scope-1",
        "statement": "x",
        "retention": {"derivative_rule": "make-ineligible"},
        "reconciliation": {"family_refs": []},
    }
    assert payload == {"scope_ref": "forged", "statement": "x"}
    # The default retention is a fresh dict: editing one completed payload leaves the default alone.
    completed["retention"]["expires_at"] = "2026-01-01T00:00:00.000Z"
    assert DEFAULT_RETENTION == {"derivative_rule": "make-ineligible"}
    assert complete_payload({}, SCOPE)["retention"] == {"derivative_rule": "make-ineligible"}


def test_complete_payload_keeps_given_retention_and_reconciliation() -> None:
    retention = {"derivative_rule": "keep", "expires_at": "2027-01-01T00:00:00.000Z"}
    reconciliation = {"family_refs": ["fam-1"]}
    completed = complete_payload({"retention": retention, "reconciliation": reconciliation}, SCOPE)
    assert completed == {"retention": retention, "reconciliation": reconciliation, "scope_ref": "scope-1"}


def test_trust_binding_body_and_receipt() -> None:
    trust = trust_binding(
        trust_class="asserted",
        evidence_digest=D1,
        policy_id="policy-a",
        policy_version="v7",
        issued_at="2026-01-01T00:00:00.000Z",
        payload_digest=D2,
    )
    receipt_body = (
        b'{"class":"asserted","evidence_digest":"' + D1.encode() + b'","issued_at":"2026-01-01T00:00:00.000Z",'
        b'"payload_digest":"' + D2.encode() + b'","revocation_epoch":"0","verifier_id":"policy-a",'
        b'"verifier_version":"v7"}'
    )
    assert trust == {
        "class": "asserted",
        "evidence_digest": D1,
        "verifier_id": "policy-a",
        "verifier_version": "v7",
        "issued_at": "2026-01-01T00:00:00.000Z",
        "revocation_epoch": "0",
        "receipt_digest": _sha("graphify-memory/asserted-trust/v1\0", receipt_body),
    }


def test_build_record_digest_and_id() -> None:
    record = build_record(
        completed={"scope_ref": "scope-1", "statement": "s"},
        payload_digest=D1,
        recorded_at="2026-01-01T00:00:00.000Z",
        recorded_cursor="7",
        authorization_receipt_digest=D2,
        trust={"class": "asserted"},
    )
    body = (
        b'{"authorization_receipt_digest":"' + D2.encode() + b'","payload_digest":"' + D1.encode() + b'",'
        b'"recorded_at":"2026-01-01T00:00:00.000Z","recorded_cursor":"7","scope_ref":"scope-1",'
        b'"statement":"s","trust":{"class":"asserted"}}'
    )
    record_digest = _sha("graphify-memory/record/v2\0", body)
    assert record == {
        "scope_ref": "scope-1",
        "statement": "s",
        "payload_digest": D1,
        "recorded_at": "2026-01-01T00:00:00.000Z",
        "recorded_cursor": "7",
        "authorization_receipt_digest": D2,
        "trust": {"class": "asserted"},
        "record_digest": record_digest,
        "record_id": _mem_id(record_digest),
    }


IDS = b'"record_digest":"' + D1.encode() + b'","record_id":"mem_x"'

# (record, canonical bytes without the two id members, canonical bytes of the whole record)
FORMS: list[tuple[dict[str, Any], bytes, bytes]] = [
    (
        {"z": 2, "record_id": "mem_x", "a": 1, "record_digest": D1},
        b'{"a":1,"z":2}',
        b'{"a":1,' + IDS + b',"z":2}',
    ),
    ({"record_id": "mem_x", "record_digest": D1, "z": 2}, b'{"z":2}', b"{" + IDS + b',"z":2}'),
    ({"a": 1, "record_id": "mem_x", "record_digest": D1}, b'{"a":1}', b'{"a":1,' + IDS + b"}"),
    ({"record_id": "mem_x", "record_digest": D1}, b"{}", b"{" + IDS + b"}"),
    ({"a": 1, "z": 2}, b'{"a":1,"z":2}', b'{"a":1,"z":2}'),
    ({"record_id": "mem_x", "a": 1}, b'{"a":1}', b'{"a":1,"record_id":"mem_x"}'),
    # A key sorting between the two id keys: they are not adjacent.
    (
        {"record_id": "mem_x", "record_e": 0, "record_digest": D1, "a": 1},
        b'{"a":1,"record_e":0}',
        b'{"a":1,"record_digest":"' + D1.encode() + b'","record_e":0,"record_id":"mem_x"}',
    ),
    # The id keys themselves are the bisect boundaries.
    (
        {"record_digest": D1, "record_digest0": 5, "record_id": "mem_x"},
        b'{"record_digest0":5}',
        b'{"record_digest":"' + D1.encode() + b'","record_digest0":5,"record_id":"mem_x"}',
    ),
    # The id members' bytes also occur in a nested object (sorting before them and after them).
    (
        {"a": {"record_digest": D1, "record_id": "mem_x"}, "record_digest": D1, "record_id": "mem_x", "z": 1},
        b'{"a":{' + IDS + b'},"z":1}',
        b'{"a":{' + IDS + b"}," + IDS + b',"z":1}',
    ),
    (
        {"record_digest": D1, "record_id": "mem_x", "z": {"record_digest": D1, "record_id": "mem_x"}},
        b'{"z":{' + IDS + b"}}",
        b"{" + IDS + b',"z":{' + IDS + b"}}",
    ),
    (
        {"record_digest": D1, "record_id": "mem_x", "s": "x", "z": {"record_digest": D1, "record_id": "mem_x"}},
        b'{"s":"x","z":{' + IDS + b"}}",
        b"{" + IDS + b',"s":"x","z":{' + IDS + b"}}",
    ),
    # A non-ASCII key.
    (
        {"\u00e9": 1, "record_id": "mem_x", "record_digest": D1},
        b'{"\xc3\xa9":1}',
        b"{" + IDS + b',"\xc3\xa9":1}',
    ),
]


@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize(("record", "rest", "whole"), FORMS)
def test_record_forms(record: dict[str, Any], rest: bytes, whole: bytes, plain: bool) -> None:
    assert record_forms(record, plain=plain) == (rest, whole)


def _body_and_row(
    expires_at: str | None = "2026-01-02T00:00:00.000Z", **row_changes: Any
) -> tuple[dict[str, Any], RecordRow, bytes]:
    """A body sealed with a correct digest and id, the row it re-derives, and its whole canonical bytes."""
    body: dict[str, Any] = {
        "payload_digest": D2,
        "retention": {} if expires_at is None else {"expires_at": expires_at},
        "valid_time": {"t": 1000, "t_end": 2000},
    }
    retention = (
        b'"retention":{}' if expires_at is None else b'"retention":{"expires_at":"' + expires_at.encode() + b'"}'
    )
    rest = b'{"payload_digest":"' + D2.encode() + b'",' + retention + b',"valid_time":{"t":1000,"t_end":2000}}'
    record_digest = _sha("graphify-memory/record/v2\0", rest)
    record_id = _mem_id(record_digest)
    body.update(record_digest=record_digest, record_id=record_id)
    whole = (
        b'{"payload_digest":"'
        + D2.encode()
        + b'","record_digest":"'
        + record_digest.encode()
        + b'","record_id":"'
        + record_id.encode()
        + b'",'
        + retention
        + b',"valid_time":{"t":1000,"t_end":2000}}'
    )
    fields: dict[str, Any] = {
        "record_id": record_id,
        "state": "accepted_current",
        "record_digest": record_digest,
        "payload_digest": D2,
        "sealed": None,
        "recorded_cursor": 1,
        "accepted_cursor": 2,
        "valid_from": 1000,
        "valid_to": 2000,
        "expires_at_ms": 1767312000000,  # 2026-01-02T00:00:00Z
    }
    fields.update(row_changes)
    return body, RecordRow(**fields), whole


@pytest.mark.parametrize("plain", [False, True])
def test_rederived_returns_the_whole_canonical_body(plain: bool) -> None:
    body, row, whole = _body_and_row()
    assert rederived(body, row, plain=plain) == whole


def test_rederived_without_expiry() -> None:
    body, row, whole = _body_and_row(None, expires_at_ms=None)
    assert body["retention"] == {}
    assert b'"retention":{}' in whole
    assert rederived(body, row) == whole
    _, row_with_expiry, _ = _body_and_row(None)
    assert rederived(body, row_with_expiry) is None


@pytest.mark.parametrize(
    "row_changes",
    [
        {"record_id": "mem_other"},
        {"record_digest": D3},
        {"payload_digest": D3},
        {"valid_from": 1001},
        {"valid_to": 2001},
        {"valid_to": None},
        {"expires_at_ms": 1767312000001},
        {"expires_at_ms": None},
    ],
)
def test_rederived_refuses_a_row_the_body_does_not_say(row_changes: dict[str, Any]) -> None:
    body, row, _ = _body_and_row(**row_changes)
    assert rederived(body, row) is None


@pytest.mark.parametrize(
    "edit",
    [
        {"retention": {"expires_at": "2026-01-02T00:00:00Z"}},
        {"retention": {"expires_at": 1767312000000}},
        {"retention": "none"},
        {"valid_time": [1000, 2000]},
        {"statement": "added after sealing"},
    ],
)
def test_rederived_refuses_a_body_that_does_not_rederive(edit: dict[str, Any]) -> None:
    body, row, _ = _body_and_row()
    assert rederived({**body, **edit}, row) is None


@pytest.mark.parametrize("expires_at", ["2026-01-02T00:00:00Z", "2026-02-30T00:00:00.000Z", "tomorrow"])
def test_rederived_refuses_a_sealed_body_with_a_malformed_expiry(expires_at: str) -> None:
    body, row, whole = _body_and_row(expires_at)
    assert record_forms(body)[1] == whole  # the body itself is consistent: only its expiry is malformed
    assert rederived(body, row) is None


def test_rederived_refuses_a_non_object() -> None:
    _, row, _ = _body_and_row()
    assert rederived(["not", "a", "record"], row) is None
