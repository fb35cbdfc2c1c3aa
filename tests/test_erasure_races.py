"""Readers that meet a key an erasure destroyed meanwhile (found by a concurrency audit).

A reader holds a store snapshot but opens keys in the live vault. A withdraw or forget that
commits (and destroys its key) in between makes the key look missing. That is not a lost key: an
admission must answer what the erasure left (``ALREADY_TERMINAL``), and ``MemoryAdmin.verify`` must
confirm a ``BLOB_MISSING`` on a fresh snapshot before reporting it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.connect import connect
from engram_memory.errors import ErrorCode
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import KeyVault, SealedEnvelope
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import Harness, fail, make_binding, make_key, ok

A = make_binding()


class _VaultRunningFirst:
    """A KeyVault that runs ``before`` once, on the first ``open`` it serves, then delegates."""

    def __init__(self, inner: KeyVault) -> None:
        self.inner = inner
        self.before: Callable[[], object] | None = None
        self.ran = False

    @property
    def destroys_synchronously(self) -> bool:
        return self.inner.destroys_synchronously

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        return self.inner.seal(context, plaintext)

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        before, self.before = self.before, None
        if before is not None:
            before()
            self.ran = True
        return self.inner.open(envelope, context)

    def destroy(self, *key_refs: str) -> None:
        self.inner.destroy(*key_refs)


def _pending_on_a_racing_vault(label: str) -> tuple[Harness, _VaultRunningFirst, str]:
    """An accepting in-memory service over a :class:`_VaultRunningFirst`, and one pending candidate."""
    clock = ManualClock()
    vault = _VaultRunningFirst(InMemoryKeyVault())
    service = MemoryService(store=InMemoryStore(), vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock)
    harness = Harness(service, clock)
    return harness, vault, harness.pending(A, make_key(label))


def test_an_admission_whose_candidate_is_withdrawn_meanwhile_is_already_terminal() -> None:
    """The withdraw commits (and destroys the key) between the admission's read and its vault open."""
    harness, vault, candidate_id = _pending_on_a_racing_vault("raced")
    vault.before = lambda: ok(harness.withdraw(A, candidate_id, make_key("raced-withdraw")))
    fail(harness.admit(A, candidate_id, make_key("raced-admit")), ErrorCode.ALREADY_TERMINAL, retriable=False)
    assert vault.ran  # the race really ran
    fail(harness.admit(A, candidate_id, make_key("raced-admit")), ErrorCode.ALREADY_TERMINAL, retriable=False)


def test_an_admission_whose_candidate_is_admitted_meanwhile_is_retriable_then_a_duplicate() -> None:
    """Another admission accepts the candidate (and its key is reaped) while this one is deciding."""
    harness, vault, candidate_id = _pending_on_a_racing_vault("admitted-twice")

    def other_admission() -> None:
        won = ok(harness.admit(A, candidate_id, make_key("admitted-first")))
        assert won["outcome"]["status"] == "accepted"
        assert MemoryAdmin(harness.service).reap_keys() == 1  # the candidate's key is gone now

    vault.before = other_admission
    fail(harness.admit(A, candidate_id, make_key("admitted-second")), ErrorCode.STORE_UNAVAILABLE, retriable=True)
    assert vault.ran
    retried = ok(harness.admit(A, candidate_id, make_key("admitted-second")))
    assert retried["outcome"]["status"] == "duplicate_exact"


def test_an_admission_whose_key_is_lost_while_still_pending_is_blob_missing() -> None:
    """Without a racing call, a pending candidate whose key is gone stays the operator's problem."""
    clock = ManualClock()
    vault = InMemoryKeyVault()
    store = InMemoryStore()
    harness = Harness(
        MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock), clock
    )
    candidate_id = harness.pending(A, make_key("lost"))
    sealed = store.raw_partition(A.scope).candidates[candidate_id].sealed
    assert sealed is not None
    vault.destroy(sealed.key_ref)
    fail(harness.admit(A, candidate_id, make_key("lost-admit")), ErrorCode.BLOB_MISSING, retriable=False)


@pytest.mark.parametrize("erasure", ["forget", "withdraw"])
def test_verify_of_a_live_store_confirms_a_missing_key_on_a_fresh_snapshot(tmp_path: Path, erasure: str) -> None:
    """The erasure commits between verify's snapshot and its first vault open: the report is ok."""
    db = tmp_path / "live.db"
    clock = ManualClock()
    writer = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="accept"), clock=clock)
    harness = Harness(writer, clock)
    _, record_id = harness.accepted(A, make_key("verified"))
    pending = harness.pending(A, make_key("verified-pending"))
    erase: dict[str, Callable[[], object]] = {
        "forget": lambda: ok(harness.forget(A, record_id, make_key("verified-forget"))),
        "withdraw": lambda: ok(harness.withdraw(A, pending, make_key("verified-withdraw"))),
    }
    reader_side = connect(f"sqlite:///{db}", clock=clock)
    vault = _VaultRunningFirst(reader_side.vault)
    verifier = MemoryService(store=reader_side.store, vault=vault, policy=reader_side.policy, clock=clock)
    vault.before = erase[erasure]
    try:
        report = MemoryAdmin(verifier).verify(tenant_id=A.tenant_id, workspace_id=A.workspace_id)
        assert vault.ran  # the erasure ran inside the first pass
        assert report.ok, report
    finally:
        reader_side.close()
        writer.close()
