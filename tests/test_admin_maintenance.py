"""``MemoryAdmin`` beyond ``verify``: ``reap_keys`` counts every doomed key of every scope and keeps going past
a scope the vault fails; ``adjudicate`` takes only ``accept`` or ``reject``; an admitted candidate row that lost
its outcome is refused, never re-admitted; ``pending_candidates`` tells a candidate decided while it lists them
from one whose key is lost; ``pending_candidate`` opens one candidate, ``forgotten`` included; every method that
names a scope refuses the tenant and workspace ids every service call refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode, ProtocolError, StoreUnavailableError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import SealedEnvelope
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import Harness, capture_args, fail, make_binding, make_key, ok

A: Final = make_binding("tenant-ops", "workspace-a")
B: Final = make_binding("tenant-ops", "workspace-b")


class _PickyVault(InMemoryKeyVault):
    """An in-memory vault whose ``destroy`` fails for any call naming a key in ``refused``."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: set[str] = set()

    def destroy(self, *key_refs: str) -> None:
        if self.refused.intersection(key_refs):
            raise ConnectionError("vault unreachable for these keys")
        super().destroy(*key_refs)


@attrs.frozen
class _World:
    store: InMemoryStore
    vault: _PickyVault
    harness: Harness

    @property
    def admin(self) -> MemoryAdmin:
        return self.harness.admin

    def doom(self, binding: HostBinding, count: int) -> list[str]:
        """``count`` fresh vault keys, doomed in the scope of ``binding`` (as a deferred destruction leaves them)."""
        refs = [self.vault.seal(f"context-{n}", b"sealed").key_ref for n in range(count)]
        with self.store.write(binding.scope) as unit:
            for ref in refs:
                unit.doom_key(ref)
        return refs

    def doomed(self, binding: HostBinding) -> list[str]:
        with self.store.read(binding.scope) as reader:
            return reader.doomed_keys()

    def high_water(self, binding: HostBinding) -> int:
        with self.store.read(binding.scope) as reader:
            return reader.high_water()


def _world(admission: str) -> _World:
    store, vault, clock = InMemoryStore(), _PickyVault(), ManualClock()
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(admission=admission), clock=clock)  # type: ignore[arg-type]
    return _World(store=store, vault=vault, harness=Harness(service, clock))


@pytest.fixture
def world() -> _World:
    """Two scopes with one pending candidate each (so ``store.scopes()`` lists both), nothing doomed yet."""
    made = _world("adjudicate")
    made.harness.pending(A, make_key("ops-a"))
    made.harness.pending(B, make_key("ops-b"))
    assert made.store.scopes() == sorted([A.scope, B.scope])
    assert made.admin.reap_keys() == 0
    return made


# --------------------------------------------------------------------------- reap_keys


def test_reap_keys_returns_the_number_of_keys_it_destroyed_across_scopes(world: _World) -> None:
    doomed = world.doom(A, 2) + world.doom(B, 3)
    assert all(world.vault.holds(ref) for ref in doomed)
    assert world.admin.reap_keys() == 5
    assert [ref for ref in doomed if world.vault.holds(ref)] == []
    assert (world.doomed(A), world.doomed(B)) == ([], [])
    assert world.admin.reap_keys() == 0


def test_reap_keys_destroys_the_other_scopes_when_one_scope_fails(world: _World) -> None:
    first, second = (A, B) if A.scope < B.scope else (B, A)  # scopes are reaped in key order
    failing = world.doom(first, 2)
    reaped = world.doom(second, 3)
    world.vault.refused = set(failing)
    with pytest.raises(EngramError) as failed:
        world.admin.reap_keys()
    assert (failed.value.code, failed.value.retriable) == (ErrorCode.STORE_UNAVAILABLE, True)
    assert [ref for ref in reaped if world.vault.holds(ref)] == []  # the later scope was still reaped
    assert world.doomed(second) == []
    assert all(world.vault.holds(ref) for ref in failing)
    assert world.doomed(first) == sorted(failing)  # and the failed keys stay doomed for a retry
    world.vault.refused = set()
    assert world.admin.reap_keys() == 2
    assert world.doomed(first) == []
    assert not any(world.vault.holds(ref) for ref in failing)


def test_reap_keys_reaps_the_scopes_it_can_read_and_blames_the_store_for_the_others(
    world: _World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope whose view the store cannot give now (busy) is skipped, not the end of the reap."""
    first, second = (A, B) if A.scope < B.scope else (B, A)  # scopes are reaped in key order
    unread = world.doom(first, 2)
    reaped = world.doom(second, 3)
    read = InMemoryStore.read

    def busy_for_the_first(store: InMemoryStore, scope: str) -> Any:
        if scope == first.scope:
            raise StoreUnavailableError("the store is busy")
        return read(store, scope)

    monkeypatch.setattr(InMemoryStore, "read", busy_for_the_first)
    with pytest.raises(EngramError) as failed:
        world.admin.reap_keys()
    assert (failed.value.code, failed.value.retriable) == (ErrorCode.STORE_UNAVAILABLE, True)
    assert isinstance(failed.value.__cause__, StoreUnavailableError)  # the store's error: no vault failed
    assert [ref for ref in reaped if world.vault.holds(ref)] == []  # the readable scope was reaped
    monkeypatch.undo()
    assert world.doomed(second) == []
    assert all(world.vault.holds(ref) for ref in unread)
    assert world.admin.reap_keys() == 2


# --------------------------------------------------------------------------- adjudicate


@pytest.mark.parametrize("decision", ["maybe", "", "Accept", "adjudication_required", "reject "])
def test_adjudicate_refuses_a_decision_other_than_accept_or_reject(world: _World, decision: str) -> None:
    candidate_id = world.harness.pending(A, make_key("ops-adjudicate"))
    before = world.high_water(A)
    with pytest.raises(EngramError) as refused:
        world.admin.adjudicate(
            tenant_id=A.tenant_id,
            workspace_id=A.workspace_id,
            candidate_id=candidate_id,
            decision=decision,  # type: ignore[arg-type]
        )
    assert (refused.value.code, refused.value.pointer, refused.value.retriable) == (
        ErrorCode.INVALID_SCHEMA,
        "/decision",
        False,
    )
    assert world.high_water(A) == before  # nothing was decided
    with world.store.read(A.scope) as reader:
        row = reader.candidate(candidate_id)
    assert row is not None
    assert (row.state, row.outcome) == ("pending", None)


# --------------------------------------------------------------------------- lifecycle


def test_an_admitted_candidate_row_without_its_outcome_is_already_terminal() -> None:
    """Only an admitted row that carries its outcome answers ``duplicate_exact``; one that lost it is refused."""
    made = _world("accept")
    candidate_id = made.harness.pending(A, make_key("ops-lost-outcome"))
    with made.store.read(A.scope) as reader:
        row = reader.candidate(candidate_id)
    assert row is not None
    with made.store.write(A.scope) as unit:
        unit.put_candidate(attrs.evolve(row, state="admitted", outcome=None))
    before = made.high_water(A)
    envelope = made.harness.admit(A, candidate_id, make_key("ops-lost-outcome-admit"))
    fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)
    with pytest.raises(EngramError) as refused:
        made.admin.adjudicate(
            tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=candidate_id, decision="accept"
        )
    assert refused.value.code is ErrorCode.ALREADY_TERMINAL
    assert made.high_water(A) == before


# --------------------------------------------------------------------------- pending_candidates


def test_pending_candidates_refuses_a_pending_candidate_whose_key_is_lost(world: _World) -> None:
    """Still pending, with the same envelope, and its key gone: not a race but a lost key."""
    candidate_id = world.harness.pending(A, make_key("ops-lost-key"))
    with world.store.read(A.scope) as reader:
        row = reader.candidate(candidate_id)
    assert row is not None
    assert row.sealed is not None
    world.vault.destroy(row.sealed.key_ref)  # outside any erasure
    with pytest.raises(EngramError) as refused:
        world.admin.pending_candidates(tenant_id=A.tenant_id, workspace_id=A.workspace_id)
    assert refused.value.code is ErrorCode.BLOB_MISSING
    assert refused.value.__notes__ == ["pending candidate key unavailable"]


class _DecidedWhileListed(InMemoryKeyVault):
    """An in-memory vault that runs ``competitor`` once, right before it opens an envelope."""

    def __init__(self) -> None:
        super().__init__()
        self.competitor: Callable[[], object] | None = None

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        competitor, self.competitor = self.competitor, None
        if competitor is not None:
            competitor()
        return super().open(envelope, context)


@pytest.mark.parametrize("decision", ["reject", "withdraw"])
def test_pending_candidates_leaves_out_a_candidate_decided_while_the_list_is_read(decision: str) -> None:
    """The list is read in one view, each envelope opened after: one whose key a decision destroyed
    meanwhile is no longer pending and is left out, not reported as a lost key."""
    store, vault, clock = InMemoryStore(), _DecidedWhileListed(), ManualClock()
    harness = Harness(MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock), clock)
    first = harness.pending(A, make_key("ops-listed-first"))
    second = harness.pending(A, make_key("ops-listed-second"))

    decided: list[str] = []

    def decide_first() -> None:
        decided.append(first)
        if decision == "reject":
            harness.admin.adjudicate(
                tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=first, decision="reject"
            )
        else:
            ok(harness.withdraw(A, first, make_key("ops-listed-withdraw")))

    vault.competitor = decide_first
    listed = harness.admin.pending_candidates(tenant_id=A.tenant_id, workspace_id=A.workspace_id)
    assert decided == [first]  # the decision ran while the first envelope was being opened
    assert [candidate.candidate_id for candidate in listed] == [second]


# --------------------------------------------------------------------------- pending_candidate


def test_pending_candidate_is_the_listed_candidate_or_none_once_it_left_pending() -> None:
    """One candidate as ``pending_candidates`` lists it; ``None`` for an unknown, admitted or rejected one."""
    made = _world("adjudicate")
    scope = {"tenant_id": A.tenant_id, "workspace_id": A.workspace_id}
    waiting = made.harness.pending(A, make_key("ops-one-waiting"))
    admitted = made.harness.pending(A, make_key("ops-one-admitted"))
    rejected = made.harness.pending(A, make_key("ops-one-rejected"))
    made.admin.adjudicate(tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=admitted, decision="accept")
    made.admin.adjudicate(tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=rejected, decision="reject")
    before = made.high_water(A)
    assert made.admin.pending_candidates(**scope) == [made.admin.pending_candidate(**scope, candidate_id=waiting)]
    for gone in (admitted, rejected, "candidate_nope"):
        assert made.admin.pending_candidate(**scope, candidate_id=gone) is None
    assert (
        made.admin.pending_candidate(tenant_id=B.tenant_id, workspace_id=B.workspace_id, candidate_id=waiting) is None
    )
    assert made.high_water(A) == before  # reading writes nothing


def test_pending_candidate_says_when_its_content_was_forgotten() -> None:
    made = _world("accept")
    scope = {"tenant_id": A.tenant_id, "workspace_id": A.workspace_id}
    _, record_id = made.harness.accepted(A, make_key("ops-forgotten-first"), words=("zqforgottenword",))
    recaptured = made.harness.pending(A, make_key("ops-forgotten-again"), words=("zqforgottenword",))
    fresh = made.harness.pending(A, make_key("ops-forgotten-other"), words=("zqotherword",))

    def forgotten(candidate_id: str) -> bool:
        candidate = made.admin.pending_candidate(**scope, candidate_id=candidate_id)
        assert candidate is not None
        return candidate.forgotten

    assert forgotten(recaptured) is False
    ok(made.harness.forget(A, record_id, make_key("ops-forgotten-forget")))
    assert (forgotten(recaptured), forgotten(fresh)) == (True, False)


# --------------------------------------------------------------------------- tenant and workspace ids

_REFUSED_IDS: Final = [
    pytest.param("", "workspace-a", (ValueError, "tenant_id"), id="empty-tenant"),
    pytest.param("tenant-ops", "", (ValueError, "workspace_id"), id="empty-workspace"),
    pytest.param("", "", (ValueError, "tenant_id"), id="both-empty"),
    pytest.param("te\u0301nant", "workspace-a", (ValueError, "tenant_id"), id="nfd-tenant"),
    pytest.param("tenant-ops", "w\ud800", (ValueError, "workspace_id"), id="lone-surrogate-workspace"),
    pytest.param(None, "workspace-a", (TypeError, "tenant_id"), id="none-tenant"),
    pytest.param("tenant-ops", b"workspace-a", (TypeError, "workspace_id"), id="bytes-workspace"),
]
_MESSAGES: Final = {ValueError: "{} must be non-empty, valid Unicode text in NFC", TypeError: "{} must be a str"}


def _call(admin: MemoryAdmin, method: str, tenant: Any, workspace: Any, candidate_id: str) -> object:
    """``method`` of ``MemoryAdmin`` (one that names a scope by tenant and workspace) on that scope."""
    scope = {"tenant_id": tenant, "workspace_id": workspace}
    if method == "scope":
        return MemoryAdmin.scope(**scope)
    if method in {"pending_candidate", "adjudicate"}:
        scope["candidate_id"] = candidate_id
    if method == "adjudicate":
        scope["decision"] = "accept"
    return getattr(admin, method)(**scope)


@pytest.mark.parametrize(
    "method", ["scope", "pending_candidates", "pending_candidate", "adjudicate", "verify", "state_digest"]
)
@pytest.mark.parametrize(("tenant", "workspace", "refusal"), _REFUSED_IDS)
def test_ids_no_binding_could_use_are_refused_by_every_scoped_method(
    world: _World, method: str, tenant: object, workspace: object, refusal: tuple[type[Exception], str]
) -> None:
    """Every service call refuses such a binding (-32603): maintenance must not answer for a scope no agent has."""
    error, named = refusal
    candidate_id = world.harness.pending(A, make_key("ops-refused-ids"))
    scopes, height = world.store.scopes(), world.high_water(A)
    with pytest.raises(error) as refused:
        _call(world.admin, method, tenant, workspace, candidate_id)
    assert str(refused.value) == _MESSAGES[error].format(named)  # constant: never the id itself
    assert (world.store.scopes(), world.high_water(A)) == (scopes, height)  # nothing written
    assert (
        world.admin.pending_candidate(tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=candidate_id)
        is not None
    )


@pytest.mark.parametrize(("tenant", "workspace"), [("", "w"), ("t", ""), ("te\u0301nant", "w"), ("t", "w\ud800")])
def test_the_ids_maintenance_refuses_are_the_ids_every_service_call_refuses(
    world: _World, tenant: str, workspace: str
) -> None:
    binding = attrs.evolve(A, tenant_id=tenant, workspace_id=workspace)
    with pytest.raises(ProtocolError):
        world.harness.service.call_tool("engram_memory_search", {"query": "x", "purpose_ref": A.purpose_ref}, binding)
    with pytest.raises(ValueError, match="must be non-empty, valid Unicode text in NFC"):
        MemoryAdmin.scope(tenant_id=tenant, workspace_id=workspace)


def test_scope_is_the_key_of_the_binding_and_of_the_store() -> None:
    made = _world("adjudicate")
    made.harness.pending(A, make_key("ops-scope-key"))
    assert MemoryAdmin.scope(tenant_id=A.tenant_id, workspace_id=A.workspace_id) == A.scope
    assert made.store.scopes() == [MemoryAdmin.scope(tenant_id="tenant-ops", workspace_id="workspace-a")]


@pytest.mark.parametrize("url", ["memory:", "sqlite"])
def test_every_maintenance_method_answers_store_unavailable_once_the_service_is_closed(url: str, tmp_path: Any) -> None:
    """As ``adjudicate`` does: an ``EngramError`` (retriable), never the store's own port error."""
    from engram_memory import connect  # noqa: PLC0415

    service = connect("memory:" if url == "memory:" else f"sqlite:///{tmp_path / 'closed.db'}")
    binding = make_binding()
    captured = ok(service.call_tool("engram_memory_capture", capture_args(make_key("closed-admin")), binding))
    admin = MemoryAdmin(service)
    service.close()
    scope_ids = {"tenant_id": binding.tenant_id, "workspace_id": binding.workspace_id}
    calls: dict[str, Callable[[], object]] = {
        "reap_keys": admin.reap_keys,
        "verify_scope": lambda: admin.verify_scope(binding.scope),
        "verify": lambda: admin.verify(**scope_ids),
        "state_digest": lambda: admin.state_digest(**scope_ids),
        "pending_candidates": lambda: admin.pending_candidates(**scope_ids),
        "pending_candidate": lambda: admin.pending_candidate(**scope_ids, candidate_id=captured["candidate_id"]),
    }
    for name, call in calls.items():
        with pytest.raises(EngramError) as info:
            call()
        assert (info.value.code, info.value.retriable) == (ErrorCode.STORE_UNAVAILABLE, True), name
