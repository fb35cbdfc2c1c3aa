"""forget answers only once the body key is destroyed: a vault failure aborts it with nothing written."""

from __future__ import annotations

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import capture_args, confirm, make_binding


class FlakyVault(InMemoryKeyVault):
    """Refuses to destroy while ``broken`` is set."""

    broken = False

    def destroy(self, *key_refs: str) -> None:
        if self.broken:
            raise OSError("vault offline")
        super().destroy(*key_refs)


def test_a_vault_failure_aborts_forget_and_a_retry_completes_it() -> None:
    clock = ManualClock()
    vault = FlakyVault()
    store = InMemoryStore()
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock)
    admin = MemoryAdmin(service)
    binding = make_binding()
    captured = service.call_tool("engram_memory_capture", capture_args("forget-vault-capture-1"), binding)
    candidate_id = captured["output"]["value"]["candidate_id"]
    admitted = service.call_tool(
        "engram_memory_request_admission",
        {"candidate_id": candidate_id, "idempotency_key": "forget-vault-admission-1"},
        binding,
    )
    record_id = admitted["output"]["value"]["outcome"]["record_id"]
    with store.read(binding.scope) as reader:
        row = reader.record(record_id)
    assert row is not None
    assert row.sealed is not None
    key_ref = row.sealed.key_ref
    before = admin.state_digest(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id)

    forget = {"record_id": record_id, "idempotency_key": "forget-vault-forget-01", "reason_ref": "owner-request"}
    vault.broken = True
    refused = service.call_tool(
        "engram_memory_forget", forget, confirm(service, "engram_memory_forget", forget, binding, clock)
    )
    assert refused["ok"] is False
    assert refused["error"]["code"] == "STORE_UNAVAILABLE"
    assert refused["error"]["retriable"] is True
    assert admin.state_digest(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id) == before
    assert vault.holds(key_ref)

    vault.broken = False
    done = service.call_tool(
        "engram_memory_forget", forget, confirm(service, "engram_memory_forget", forget, binding, clock)
    )
    assert done["ok"] is True
    assert done["output"]["value"]["receipt"]["to_state"] == "tombstoned"
    assert not vault.holds(key_ref)
    assert admin.verify(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id).ok
