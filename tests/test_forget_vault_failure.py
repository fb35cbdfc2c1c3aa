"""Key destruction and the failures around it: forget and withdraw never leave a readable record
without its key, and a refusal (deadline, confirmation) never follows a destruction.

forget dooms the record's key in its unit and destroys it right after commit: it answers only once
the key is gone, and a vault failure leaves the record erased from the index and unreadable, its
key doomed, with a retriable error whose retry (a replay) completes the destruction. withdraw
destroys its key inside the unit, after the checks that could still refuse it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import capture_args, confirm, make_binding

FORGET = "engram_memory_forget"
WITHDRAW = "engram_memory_withdraw"


class FlakyVault(InMemoryKeyVault):
    """Refuses to destroy while ``broken`` is set; with ``partial``, destroys the keys first, then raises
    (as ``SQLiteKeyVault`` does when its deleting commit succeeds and its checkpoint cannot run)."""

    broken = False
    partial = False

    def destroy(self, *key_refs: str) -> None:
        if self.broken:
            if self.partial:
                super().destroy(*key_refs)
            raise OSError("vault offline")
        super().destroy(*key_refs)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.vault = FlakyVault()
        self.store = InMemoryStore()
        self.service = MemoryService(
            store=self.store, vault=self.vault, policy=DefaultPolicy(admission="accept"), clock=self.clock
        )
        self.admin = MemoryAdmin(self.service)
        self.binding = make_binding()

    def call(self, tool: str, args: dict[str, Any], binding: Any = None) -> dict[str, Any]:
        bound = confirm(self.service, tool, args, binding or self.binding, self.clock)
        return self.service.call_tool(tool, args, bound)

    def capture(self, key: str) -> str:
        captured = self.service.call_tool("engram_memory_capture", capture_args(key), self.binding)
        candidate_id: str = captured["output"]["value"]["candidate_id"]
        return candidate_id

    def admitted_record(self, key: str) -> tuple[str, str]:
        """A record id and its body key ref."""
        candidate_id = self.capture(key)
        admitted = self.service.call_tool(
            "engram_memory_request_admission",
            {"candidate_id": candidate_id, "idempotency_key": key + "-admission"},
            self.binding,
        )
        record_id: str = admitted["output"]["value"]["outcome"]["record_id"]
        with self.store.read(self.binding.scope) as reader:
            row = reader.record(record_id)
        assert row is not None
        assert row.sealed is not None
        return record_id, row.sealed.key_ref

    def candidate_key(self, candidate_id: str) -> str:
        with self.store.read(self.binding.scope) as reader:
            row = reader.candidate(candidate_id)
        assert row is not None
        assert row.sealed is not None
        return row.sealed.key_ref

    def state(self) -> str:
        return self.admin.state_digest(tenant_id=self.binding.tenant_id, workspace_id=self.binding.workspace_id)

    def get(self, record_id: str) -> dict[str, Any]:
        return self.service.call_tool(
            "engram_memory_get", {"record_id": record_id, "purpose_ref": self.binding.purpose_ref}, self.binding
        )


def forget_args(record_id: str, key: str = "forget-vault-forget-01") -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key, "reason_ref": "owner-request"}


def test_a_vault_failure_erases_the_record_and_a_retry_completes_the_key_destruction() -> None:
    world = World()
    record_id, key_ref = world.admitted_record("forget-vault-capture-1")
    forget = forget_args(record_id)
    world.vault.broken = True

    refused = world.call(FORGET, forget)

    assert refused["ok"] is False
    assert refused["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
    assert refused["error"]["retriable"] is True
    assert world.vault.holds(key_ref)  # still alive, but doomed and no longer reachable
    with world.store.read(world.binding.scope) as reader:
        row = reader.record(record_id)
        assert row is not None
        assert row.state == "tombstoned"
        assert row.sealed is None
        assert list(reader.indexed_ids()) == []
        assert key_ref in reader.doomed_keys()
    assert world.get(record_id)["error"]["code"] == "NOT_FOUND"

    still = world.call(FORGET, forget)  # the replay answers only once the key is gone
    assert still["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
    assert world.vault.holds(key_ref)

    world.vault.broken = False
    done = world.call(FORGET, forget)
    assert done["ok"] is True
    assert done["output"]["value"]["replayed"] is True
    assert done["output"]["value"]["receipt"]["to_state"] == "tombstoned"
    assert not world.vault.holds(key_ref)
    with world.store.read(world.binding.scope) as reader:
        assert reader.doomed_keys() == []
    assert world.admin.verify(tenant_id=world.binding.tenant_id, workspace_id=world.binding.workspace_id).ok


def test_a_vault_that_destroys_then_fails_never_leaves_a_readable_record_without_its_key() -> None:
    world = World()
    record_id, key_ref = world.admitted_record("forget-vault-capture-2")
    kept_id, _ = world.admitted_record("forget-vault-capture-3")
    world.vault.broken = world.vault.partial = True

    refused = world.call(FORGET, forget_args(record_id, "forget-vault-forget-02"))

    assert refused["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
    assert not world.vault.holds(key_ref)
    assert world.get(record_id)["error"]["code"] == "NOT_FOUND"  # erased, not BLOB_MISSING
    search = world.service.call_tool(
        "engram_memory_search", {"query": "convention", "purpose_ref": world.binding.purpose_ref}, world.binding
    )
    assert search["ok"] is True  # a search never trips over the half-forgotten record
    assert [packet["record"]["record_id"] for packet in search["output"]["value"]["records"]] == [kept_id]


def test_a_deadline_that_passes_during_forget_leaves_record_and_key_intact() -> None:
    world = World()
    record_id, key_ref = world.admitted_record("forget-vault-capture-4")
    before = world.state()
    forget = forget_args(record_id, "forget-vault-forget-04")
    bound = confirm(world.service, FORGET, forget, world.binding, world.clock)
    late = attrs.evolve(bound, deadline=world.clock.now() + timedelta(seconds=5))
    original_write = world.store.write

    def write_then_late(scope: str) -> Any:  # the deadline passes once the unit of work has begun
        world.clock.advance(timedelta(seconds=10))
        return original_write(scope)

    world.store.write = write_then_late  # type: ignore[method-assign]
    refused = world.service.call_tool(FORGET, forget, late)

    assert refused["error"]["code"] == "DEADLINE_EXCEEDED"
    assert world.vault.holds(key_ref)
    assert world.state() == before
    assert world.get(record_id)["ok"] is True


def test_a_deadline_that_passes_during_withdraw_is_refused_before_the_key_is_destroyed() -> None:
    world = World()
    candidate_id = world.capture("withdraw-deadline-capture-1")
    key_ref = world.candidate_key(candidate_id)
    before = world.state()
    withdraw = {"candidate_id": candidate_id, "idempotency_key": "withdraw-deadline-01", "reason_ref": "owner"}
    bound = confirm(world.service, WITHDRAW, withdraw, world.binding, world.clock)
    late = attrs.evolve(bound, deadline=world.clock.now() + timedelta(seconds=5))
    original_write = world.store.write

    def write_then_late(scope: str) -> Any:
        world.clock.advance(timedelta(seconds=10))
        return original_write(scope)

    world.store.write = write_then_late  # type: ignore[method-assign]
    refused = world.service.call_tool(WITHDRAW, withdraw, late)

    assert refused["error"]["code"] == "DEADLINE_EXCEEDED"
    assert refused["error"]["retriable"] is True
    assert world.vault.holds(key_ref)
    assert world.state() == before
