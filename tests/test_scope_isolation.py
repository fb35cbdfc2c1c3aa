"""Tenant isolation through the service when (tenant, workspace) pairs join to the same text.

Scope keys are derived from the two ids as separate fields (``tests/test_scope_key_vector.py``
pins the bytes). Here each ambiguous pair runs end to end on both backends. Each side captures and
admits, then neither side must see, count, fetch or act on the other's content, and each journal
must start at cursor 1, as if the other scope did not exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory import DefaultPolicy, ErrorCode, HostBinding, ManualClock, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.ports import KeyVault, Store
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing import Harness, distinctive_words, make_binding
from engram_memory.testing.fakes import GET, PURPOSE, SEARCH, fail, make_key, ok

# (tenant, workspace) pairs whose ids concatenate (or join with "/" or ":") to the same text
AMBIGUOUS_PAIRS = [
    pytest.param(("ab", "c"), ("a", "bc"), id="concat"),
    pytest.param(("a", "b/c"), ("a/b", "c"), id="slash"),
    pytest.param(("a:b", "c"), ("a", "b:c"), id="colon"),
]


@pytest.fixture(params=["memory", "sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A harness over an accepting service on a fresh in-memory or SQLite backend."""
    store: Store
    vault: KeyVault
    sqlite_vault: SQLiteKeyVault | None = None
    if request.param == "memory":
        store, vault = InMemoryStore(), InMemoryKeyVault()
    else:
        store = SQLiteStore(tmp_path / "store.db")
        vault = sqlite_vault = SQLiteKeyVault(tmp_path / "vault.db", master_key_file=tmp_path / "master.key")
    clock = ManualClock()
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission="accept"), clock=clock)
    yield Harness(service, clock)
    store.close()
    if sqlite_vault is not None:
        sqlite_vault.close()


@pytest.mark.parametrize(("left_ids", "right_ids"), AMBIGUOUS_PAIRS)
def test_ambiguous_tenant_workspace_pairs_are_separate_scopes(
    harness: Harness, left_ids: tuple[str, str], right_ids: tuple[str, str]
) -> None:
    """Neither side finds, counts, gets or admits the other's content; both journals start at 1."""
    left, right = make_binding(*left_ids), make_binding(*right_ids)
    sides: dict[str, tuple[HostBinding, tuple[str, ...], str, str]] = {}
    for name, binding in (("left", left), ("right", right)):
        kept_words = distinctive_words(f"scope-isolation:{name}:kept")
        pending_words = distinctive_words(f"scope-isolation:{name}:pending")
        kept = ok(harness.capture(binding, make_key(f"{name}-kept"), words=kept_words))
        pending = ok(harness.capture(binding, make_key(f"{name}-pending"), words=pending_words))
        admitted = ok(harness.admit(binding, kept["candidate_id"], make_key(f"{name}-kept:admit")))
        assert admitted["outcome"]["status"] == "accepted", admitted
        # one journal per scope: each side's first event is cursor 1, whatever the other did
        assert (kept["cursor"], pending["cursor"], admitted["outcome"]["cursor"]) == ("1", "2", "3")
        sides[name] = (binding, kept_words + pending_words, pending["candidate_id"], admitted["outcome"]["record_id"])

    for me, other in (("left", "right"), ("right", "left")):
        binding, my_words, _, my_record = sides[me]
        _, their_words, their_candidate, their_record = sides[other]
        own = ok(harness.call(SEARCH, {"query": " ".join(my_words), "purpose_ref": PURPOSE}, binding))
        assert [packet["record"]["record_id"] for packet in own["records"]] == [my_record]
        for word in their_words:
            found = ok(harness.call(SEARCH, {"query": word, "purpose_ref": PURPOSE}, binding))
            assert found["records"] == [], (me, word)
            assert found["rank_receipt"]["candidate_count"] == 0
        assert (
            ok(harness.call(GET, {"record_id": my_record, "purpose_ref": PURPOSE}, binding))["record"]["record_id"]
            == my_record
        )
        fail(harness.call(GET, {"record_id": their_record, "purpose_ref": PURPOSE}, binding), ErrorCode.NOT_FOUND)
        refused = harness.admit(binding, their_candidate, make_key(f"{me}-takes-{other}"))
        fail(refused, ErrorCode.NOT_FOUND)

    assert left.scope != right.scope
    assert harness.high_water(left) == harness.high_water(right) == 3  # the refusals wrote nothing
    assert {left.scope, right.scope} <= set(harness.service.store.scopes())
