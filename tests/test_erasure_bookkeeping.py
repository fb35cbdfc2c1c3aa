"""An erasure whose keys the vault destroyed answers its outcome even if the doomed rows stay.

After a withdraw or forget commits, the service destroys the doomed keys in the vault and then
clears their doomed rows in a second unit of work. When that second unit cannot run (the store's
write lock busy past its timeout), the keys are nevertheless gone: the call answers its outcome,
not ``MUTATION_OUTCOME_UNKNOWN``, and the rows wait for ``MemoryAdmin.reap_keys`` (destroying a
destroyed key again is a no-op).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.errors import StoreUnavailableError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Store, UnitOfWork
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import capture_args, confirm, make_binding, ok
from engram_memory.testing.fakes import StoreWrapper


class _DestroyWatcher(InMemoryKeyVault):
    """Counts destructions; the store below refuses the unit that follows one."""

    def __init__(self) -> None:
        super().__init__()
        self.destroyed: list[str] = []

    def destroy(self, *key_refs: str) -> None:
        super().destroy(*key_refs)
        self.destroyed.extend(key_refs)


class _BusyAfterDestroy(StoreWrapper):
    """Once armed, the store's write lock is busy for the first unit after the vault destroys keys."""

    def __init__(self, inner: Store, vault: _DestroyWatcher) -> None:
        super().__init__(inner)
        self.vault = vault
        self.armed = False
        self.refused = 0

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        if self.armed and self.vault.destroyed:
            self.armed = False
            self.refused += 1
            raise StoreUnavailableError("writer lock busy")
        return self.inner.write(scope)


@pytest.mark.parametrize("tool", ["engram_memory_withdraw", "engram_memory_forget"])
def test_an_erasure_answers_its_outcome_when_only_the_doomed_rows_could_not_be_cleared(
    tool: str, caplog: pytest.LogCaptureFixture
) -> None:
    vault = _DestroyWatcher()
    inner = InMemoryStore()
    store = _BusyAfterDestroy(inner, vault)
    clock = ManualClock()
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock)
    binding = make_binding("t", "w", "alice")
    captured = ok(service.call_tool("engram_memory_capture", capture_args("idempotency-key:rows-capture"), binding))
    target: dict[str, Any] = {"candidate_id": captured["candidate_id"]}
    if tool == "engram_memory_forget":
        admission = {"candidate_id": captured["candidate_id"], "idempotency_key": "idempotency-key:rows-admission"}
        admitted = ok(service.call_tool("engram_memory_request_admission", admission, binding))
        target = {"record_id": admitted["outcome"]["record_id"]}
    with inner.read(binding.scope) as reader:
        sealed = (
            reader.candidate(target["candidate_id"]).sealed  # type: ignore[union-attr]
            if "candidate_id" in target
            else reader.record(target["record_id"]).sealed  # type: ignore[union-attr]
        )
    assert sealed is not None
    args = {**target, "idempotency_key": "idempotency-key:rows-erasure", "reason_ref": "r"}
    approved = confirm(service, tool, args, binding, clock)
    vault.destroyed.clear()
    store.armed = True
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        value = ok(service.call_tool(tool, args, approved))
    assert value["replayed"] is False
    assert value["receipt"]["to_state"] == ("withdrawn" if tool == "engram_memory_withdraw" else "tombstoned")
    assert store.refused == 1
    assert sealed.key_ref in vault.destroyed
    assert not vault.holds(sealed.key_ref)
    assert "doomed keys destroyed; their doomed rows are cleared by a later reap" in caplog.text
    assert "is not destroyed" not in caplog.text
    with inner.read(binding.scope) as reader:
        assert sealed.key_ref in reader.doomed_keys()
    assert MemoryAdmin(service).reap_keys() >= 1
    with inner.read(binding.scope) as reader:
        assert reader.doomed_keys() == []


class _BrokenClear(StoreWrapper):
    """A store adapter whose ``clear_doomed_key`` has a defect (raises a non-port error)."""

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        return self._unit(scope)

    @contextmanager
    def _unit(self, scope: str) -> Iterator[UnitOfWork]:
        with self.inner.write(scope) as unit:
            yield _NoClear(unit)


class _NoClear:
    def __init__(self, unit: UnitOfWork) -> None:
        self._unit = unit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._unit, name)

    def clear_doomed_key(self, key_ref: str) -> None:
        raise TypeError("adapter defect")


def test_a_store_defect_clearing_the_doomed_rows_is_not_hidden(caplog: pytest.LogCaptureFixture) -> None:
    vault = InMemoryKeyVault()
    store = _BrokenClear(InMemoryStore())
    clock = ManualClock()
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock)
    binding = make_binding("t", "w", "alice")
    captured = ok(service.call_tool("engram_memory_capture", capture_args("idempotency-key:defect-capture"), binding))
    tool = "engram_memory_withdraw"
    args = {
        "candidate_id": captured["candidate_id"],
        "idempotency_key": "idempotency-key:defect-erasure",
        "reason_ref": "r",
    }
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        envelope = service.call_tool(tool, args, confirm(service, tool, args, binding, clock))
    assert envelope["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
    assert [record.levelname for record in caplog.records if record.name == "engram_memory"] == ["ERROR"]
    assert "cleared by a later reap" not in caplog.text
