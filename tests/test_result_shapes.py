"""The JSON form of the typed results: absent optionals are omitted, arrays are lists, and rebuilding is strict.

Expected values are written out by hand from the output shapes in docs/contract.md.
"""

from __future__ import annotations

from typing import Any, Final

import cattrs
import pytest

from engram_memory.results import (
    AdmissionOutcome,
    CaptureResult,
    ForgetResult,
    LifecycleReceipt,
    RecordPacket,
    RequestAdmissionResult,
    from_json,
)

D: Final = "sha256:" + "0" * 64
E: Final = "sha256:" + "1" * 64


def _receipt() -> LifecycleReceipt:
    return LifecycleReceipt(
        event_id="event-1",
        operation="tombstone",
        from_state="accepted_current",
        to_state="tombstoned",
        cursor="9",
        event_digest=D,
        authorization_receipt_digest=E,
        transaction_receipt_digest=D,
    )


def test_a_capture_without_a_record_digest_omits_it() -> None:
    value = CaptureResult(
        status="committed_pending", candidate_id="candidate_1", cursor="3", transaction_receipt_digest=D
    )
    assert value.to_json() == {
        "status": "committed_pending",
        "candidate_id": "candidate_1",
        "cursor": "3",
        "transaction_receipt_digest": D,
    }
    assert from_json(CaptureResult, value.to_json()) == value


def test_a_capture_with_a_record_digest_carries_it() -> None:
    value = CaptureResult(
        status="duplicate_exact", candidate_id="candidate_1", record_digest=E, cursor="3", transaction_receipt_digest=D
    )
    assert value.to_json() == {
        "status": "duplicate_exact",
        "candidate_id": "candidate_1",
        "record_digest": E,
        "cursor": "3",
        "transaction_receipt_digest": D,
    }


def test_a_forget_without_coverage_omits_it() -> None:
    value = ForgetResult(receipt=_receipt(), replayed=False, projection_invalidation="pending")
    assert value.to_json() == {
        "receipt": {
            "event_id": "event-1",
            "operation": "tombstone",
            "from_state": "accepted_current",
            "to_state": "tombstoned",
            "cursor": "9",
            "event_digest": D,
            "authorization_receipt_digest": E,
            "transaction_receipt_digest": D,
        },
        "replayed": False,
        "projection_invalidation": "pending",
    }


def test_a_rejected_outcome_has_no_record_id() -> None:
    value = AdmissionOutcome(
        status="rejected",
        candidate_id="candidate_1",
        cursor="4",
        decision_receipt_digest=E,
        transaction_receipt_digest=D,
    )
    assert "record_id" not in value.to_json()


def test_a_record_packet_writes_json_arrays_and_numbers() -> None:
    packet = RecordPacket(
        record={"record_id": "mem_a"}, redacted_fields=("/a", "/b"), redaction_receipt_digest=D, score=1.0, rank=1
    )
    value = packet.to_json()
    assert value == {
        "record": {"record_id": "mem_a"},
        "redacted_fields": ["/a", "/b"],
        "redaction_receipt_digest": D,
        "score": 1.0,
        "rank": 1,
    }
    assert type(value["redacted_fields"]) is list


_PACKET: Final[dict[str, Any]] = {
    "record": {"record_id": "mem_a"},
    "redacted_fields": ["/a"],
    "redaction_receipt_digest": D,
    "score": 0.5,
    "rank": 1,
}


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("score", True),
        ("score", "0.5"),
        ("rank", True),
        ("rank", 1.5),
        ("redacted_fields", "/a"),
        ("redacted_fields", [1]),
        ("redaction_receipt_digest", None),
    ],
)
def test_rebuilding_a_packet_checks_exact_json_types(field: str, bad: Any) -> None:
    assert from_json(RecordPacket, _PACKET).to_json() == _PACKET
    with pytest.raises(cattrs.BaseValidationError):
        from_json(RecordPacket, {**_PACKET, field: bad})


def test_rebuilding_refuses_null_for_an_absent_optional() -> None:
    value = {"status": "committed_pending", "candidate_id": "c", "cursor": "3", "transaction_receipt_digest": D}
    with pytest.raises(cattrs.BaseValidationError):
        from_json(CaptureResult, {**value, "record_digest": None})


@pytest.mark.parametrize("bad", [1, 0, "true", None], ids=repr)
def test_rebuilding_takes_only_a_json_boolean_for_replayed(bad: Any) -> None:
    outcome = {
        "status": "accepted",
        "candidate_id": "c",
        "record_id": "mem_a",
        "cursor": "2",
        "decision_receipt_digest": D,
        "transaction_receipt_digest": E,
    }
    value = {"outcome": outcome, "replayed": True}
    assert from_json(RequestAdmissionResult, value).to_json() == value
    with pytest.raises(cattrs.BaseValidationError) as refused:
        from_json(RequestAdmissionResult, {**value, "replayed": bad})
    assert [str(error) for error in refused.value.exceptions] == ["expected a boolean"]
