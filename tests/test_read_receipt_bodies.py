"""docs/contract.md, "Record and read receipt bodies": every digest of a search and a get, re-derived.

Each digest is recomputed here from the documented domain string and body, with ``hashlib`` and the
``rfc8785`` package over the values in the answer plus the inputs the docs name as the host's (the
binding, the policy's id and version, a record's candidate id, the journal event digest at the pin
and the scope's high water), never with the library's own digest helpers.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
import rfc8785

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PURPOSE, capture_args, make_binding, make_key, ok

A = make_binding()
SEARCH = "engram_memory_search"
WORDS = ("zqreceipt", "bodies", "documented")


def _digest(domain: str, body: Any) -> str:
    """``digest`` as the docs define it: SHA-256 of the NUL-terminated domain and the RFC 8785 bytes."""
    return "sha256:" + hashlib.sha256(domain.encode("ascii") + b"\0" + rfc8785.dumps(body)).hexdigest()


def _without(value: dict[str, Any], field: str) -> dict[str, Any]:
    return {key: item for key, item in value.items() if key != field}


def _authorization(tool: str, target: str, checked_at: str, service: MemoryService) -> str:
    body = {
        "tool": tool,
        "scope_ref": A.scope,
        "principal": A.principal,
        "agent_id": A.agent_id,
        "session": A.session,
        "purpose_ref": A.purpose_ref,
        "target": target,
        "policy_id": service.policy.policy_id,
        "policy_version": service.policy.policy_version,
        "checked_at": checked_at,
    }
    return _digest("engram-memory/authorization/v1", body)


@pytest.fixture(name="service")
def _service() -> MemoryService:
    clock = ManualClock()
    service = MemoryService(
        store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    for index in range(5):
        captured = ok(
            service.call_tool("engram_memory_capture", capture_args(make_key(f"body-{index}"), words=WORDS), A)
        )
        admit = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key(f"body-{index}-a")}
        assert ok(service.call_tool("engram_memory_request_admission", admit, A))["outcome"]["status"] == "accepted"
        clock.advance(timedelta(seconds=1))
    return service


def _host_view(service: MemoryService) -> tuple[int, dict[int, str]]:
    """What only the host can read: the scope's high water and its journal's event digests by cursor."""
    with service.store.read(A.scope) as reader:
        return reader.high_water(), {int(event.cursor): event.event_digest for event in reader.events()}


def _check_record(record: dict[str, Any]) -> None:
    assert record["record_digest"] == _digest(
        "graphify-memory/record/v2", _without(_without(record, "record_id"), "record_digest")
    )
    trust = record["trust"]
    trust_body = {**_without(trust, "receipt_digest"), "payload_digest": record["payload_digest"]}
    assert trust["receipt_digest"] == _digest("graphify-memory/asserted-trust/v1", trust_body)


def _check_rank_receipt(receipt: dict[str, Any], page: list[str], service: MemoryService, high_water: int) -> None:
    """``high_water``: the scope's high water when the page was read (the host's to know)."""
    _, events = _host_view(service)
    config = LexicalRanker().config()
    assert receipt["profile_config_digest"] == _digest("graphify-memory/recall-profile-config/v1", config)
    request = {
        "query": " ".join(WORDS),
        "purpose_ref": PURPOSE,
        "profile": receipt["profile"],
        "valid_as_of": receipt["valid_as_of"],
        "system_as_of": receipt["system_as_of"],
        "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},  # the defaults
        "budgets": {"max_candidates": 2000, "max_results": 2, "max_packet_bytes": 65_536},
    }
    assert receipt["request_digest"] == _digest("graphify-memory/recall-request/v1", request)
    authorization = _authorization(SEARCH, receipt["request_digest"], receipt["issued_at"], service)
    assert receipt["authorization_receipt_digest"] == authorization
    ranked = _ranked_ids(service)
    candidates = _digest("graphify-memory/recall-candidates/v1", {"candidate_ids": ranked})
    assert receipt["candidate_ids_digest"] == candidates
    assert receipt["ordered_ids_digest"] == _digest("graphify-memory/recall-ordered/v1", {"ordered_ids": ranked})
    assert receipt["candidate_count"] == len(ranked)
    pins = {"valid_as_of": receipt["valid_as_of"], "system_as_of": receipt["system_as_of"]}
    eligibility = _digest("graphify-memory/accepted-eligibility/v1", {"candidate_ids_digest": candidates, **pins})
    snapshot = {
        "snapshot_id": receipt["snapshot_id"],
        **pins,
        "journal_event_digest": events[int(receipt["system_as_of"])],
        "eligibility_digest": eligibility,
    }
    assert receipt["snapshot_digest"] == _digest("graphify-memory/accepted-snapshot/v1", snapshot)
    revalidation = {
        "operation": "recall_current",
        "record_ids": page,
        "eligible_record_ids": page,
        "removed": [],
        **pins,
        "validated_through_cursor": str(high_water),
        "authorization_receipt_digest": authorization,
    }
    assert receipt["revalidation_receipt_digest"] == _digest("graphify-memory/revalidation-packet/v1", revalidation)
    assert receipt["receipt_digest"] == _digest("graphify-memory/rank-receipt/v1", _without(receipt, "receipt_digest"))


def _ranked_ids(service: MemoryService) -> list[str]:
    whole = ok(service.call_tool(SEARCH, {"query": " ".join(WORDS), "purpose_ref": PURPOSE, "limit": 50}, A))
    return [packet["record"]["record_id"] for packet in whole["records"]]


def _check_redaction(packet: dict[str, Any], service: MemoryService) -> None:
    body = {
        "record_id": packet["record"]["record_id"],
        "source_record_digest": packet["record"]["record_digest"],
        "policy_version": service.policy.policy_version,
        "redacted_fields": packet["redacted_fields"],
    }
    assert packet["redaction_receipt_digest"] == _digest("graphify-memory/recall-redaction/v1", body)


def test_every_digest_of_a_search_page_re_derives_from_the_documented_bodies(service: MemoryService) -> None:
    query = {"query": " ".join(WORDS), "purpose_ref": PURPOSE, "limit": 2}
    first = ok(service.call_tool(SEARCH, query, A))
    first_high_water = _host_view(service)[0]
    ok(service.call_tool("engram_memory_capture", capture_args(make_key("between-pages")), A))  # high water moves
    second = ok(service.call_tool(SEARCH, {**query, "page_cursor": first["next_page_cursor"]}, A))
    second_high_water = _host_view(service)[0]
    assert first["rank_receipt"]["system_as_of"] == second["rank_receipt"]["system_as_of"] == str(first_high_water)
    assert second_high_water == first_high_water + 1  # the second page is validated through the new high water
    for value, high_water in ((first, first_high_water), (second, second_high_water)):
        page = [packet["record"]["record_id"] for packet in value["records"]]
        assert len(page) == 2
        _check_rank_receipt(value["rank_receipt"], page, service, high_water)
        for packet in value["records"]:
            _check_record(packet["record"])
            _check_redaction(packet, service)
        assert value["response_digest"] == _digest(
            "engram-memory/search-response/v1", _without(value, "response_digest")
        )


def test_every_digest_of_a_get_re_derives_from_the_documented_bodies(service: MemoryService) -> None:
    record_id = _ranked_ids(service)[0]
    value = ok(service.call_tool("engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}, A))
    _check_record(value["record"])
    _check_redaction(value, service)
    receipt = value["read_receipt"]
    high_water, _ = _host_view(service)
    assert (receipt["system_as_of"], receipt["validated_through_cursor"]) == (str(high_water), str(high_water))
    authorization = _authorization("engram_memory_get", record_id, receipt["checked_at"], service)
    assert receipt["authorization_receipt_digest"] == authorization
    revalidation = {
        "operation": "get",
        "record_ids": [record_id],
        "eligible_record_ids": [record_id],
        "removed": [],
        "valid_as_of": receipt["valid_as_of"],
        "system_as_of": receipt["system_as_of"],
        "validated_through_cursor": receipt["validated_through_cursor"],
        "authorization_receipt_digest": authorization,
    }
    assert receipt["revalidation_receipt_digest"] == _digest("graphify-memory/revalidation-packet/v1", revalidation)
    assert receipt["receipt_digest"] == _digest("engram-memory/read-receipt/v1", _without(receipt, "receipt_digest"))
    assert value["packet_digest"] == _digest("engram-memory/get-packet/v1", _without(value, "packet_digest"))


def test_a_records_own_authorization_is_the_captures(service: MemoryService) -> None:
    record_id = _ranked_ids(service)[0]
    record = ok(service.call_tool("engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}, A))["record"]
    with service.store.read(A.scope) as reader:
        candidate_id = next(row.candidate_id for row in reader.candidates() if row.record_id == record_id)
    expected = _authorization("engram_memory_capture", candidate_id, record["recorded_at"], service)
    assert record["authorization_receipt_digest"] == expected
