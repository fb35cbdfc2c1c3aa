"""The conformance kits check scheduled destruction too: a vault that schedules its destructions
passes the KeyVault and the service kits only if they happen, and one that never destroys fails.
Binding a kit as an integrator does: a capability left out skips its tests, a required fixture left
out errors naming it, and the kit's helpers (``unchanged``, ``StoreWrapper``) pass calls through."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.errors import JsonRpcCode, KeyUnavailableError, ProtocolError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock, KeyVault, SealedEnvelope
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import Harness, ServiceConformance, ServiceFactory, StoreWrapper, make_key, with_policy
from engram_memory.testing.fakes import CAPTURE, InMemoryCapabilities, capture_args, make_binding
from engram_memory.testing.keyvault import CompleteDestruction, KeyMaterial, KeyVaultConformance, Reopen
from engram_memory.testing.service import ACCEPT


class SchedulingVault(InMemoryKeyVault):
    """Queues destructions and carries them out on ``drain`` (as a remote KMS would, later)."""

    def __init__(self, *, drains: bool = True) -> None:
        super().__init__()
        self.queued: list[str] = []
        self.drains = drains

    @property
    def destroys_synchronously(self) -> bool:
        return False

    def destroy(self, *key_refs: str) -> None:
        self.queued += key_refs

    def drain(self) -> None:
        if self.drains:
            super().destroy(*self.queued)
        self.queued.clear()


def _drain(vault: KeyVault) -> None:
    assert isinstance(vault, SchedulingVault)
    vault.drain()


class TestASchedulingVaultThatDestroys(KeyVaultConformance):
    @pytest.fixture
    def vault(self) -> KeyVault:
        return SchedulingVault()

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        return _drain


def test_a_scheduling_vault_without_a_way_to_finish_fails_the_kit() -> None:
    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="complete_destruction"):
        kit.test_a_destroyed_key_is_unavailable(SchedulingVault(), None, None)


def test_a_vault_that_never_destroys_fails_the_kit() -> None:
    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        kit.test_a_destroyed_key_is_unavailable(SchedulingVault(drains=False), _drain, None)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        kit.test_one_call_destroys_several_keys(SchedulingVault(drains=False), _drain)


class SoftDeletingVault(InMemoryKeyVault):
    """Refuses to open a destroyed key but keeps its bytes: forgotten content stays recoverable from a copy."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, bytes] = {}

    def destroy(self, *key_refs: str) -> None:
        self.kept.update({ref: self._keys[ref] for ref in key_refs if ref in self._keys})
        super().destroy(*key_refs)


def _reveal_kept(vault: KeyVault, key_ref: str) -> bytes:
    assert isinstance(vault, SoftDeletingVault)
    return vault._keys.get(key_ref) or vault.kept[key_ref]  # KeyError (a LookupError) when neither holds it


def test_a_vault_that_only_hides_destroyed_keys_fails_the_kit_when_it_can_look_at_storage() -> None:
    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="still in the vault's storage"):
        kit.test_a_destroyed_key_is_unavailable(SoftDeletingVault(), None, _reveal_kept)
    with pytest.raises(pytest.fail.Exception, match="still in the vault's storage"):
        kit.test_destroy_is_idempotent(SoftDeletingVault(), None, _reveal_kept)
    kit.test_a_destroyed_key_is_unavailable(InMemoryKeyVault(), None, _reveal_memory)  # a real erasure passes


def test_a_key_material_binding_that_answers_none_for_a_missing_key_is_told_to_raise() -> None:
    def reveal_or_none(vault: KeyVault, key_ref: str) -> bytes:
        assert isinstance(vault, InMemoryKeyVault)
        return vault._keys.get(key_ref)  # type: ignore[return-value]  # the binding's mistake under test

    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="key_material must raise LookupError"):
        kit.test_a_destroyed_key_is_unavailable(InMemoryKeyVault(), None, reveal_or_none)


def _reveal_memory(vault: KeyVault, key_ref: str) -> bytes:
    assert isinstance(vault, InMemoryKeyVault)
    return vault._keys[key_ref]


def _services(vault: SchedulingVault) -> ServiceFactory:
    """Services over one in-memory store and ``vault``."""
    store = InMemoryStore(secret=b"s" * 32)

    def factory(clock: Clock) -> MemoryService:
        return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

    return factory


class TestAServiceOnASchedulingVault(InMemoryCapabilities, ServiceConformance):
    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        return _services(SchedulingVault())

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        return _drain


def test_a_service_on_a_vault_that_never_destroys_fails_the_service_kit() -> None:
    clock = ManualClock()
    harness = Harness(with_policy(_services(SchedulingVault(drains=False))(clock), ACCEPT), clock)
    kit = TestAServiceOnASchedulingVault()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        kit.test_withdraw_ends_the_candidate_and_destroys_its_key(harness, _drain)


# --------------------------------------------------------------------------- binding the kits, as an integrator does

A = make_binding()

_BINDINGS = """
import pytest

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import RankerConformance, ServiceConformance


class TestABackendThatCannotTamper(ServiceConformance):
    @pytest.fixture
    def service_factory(self):
        store, vault = InMemoryStore(), InMemoryKeyVault()
        return lambda clock: MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)


class TestAForgottenServiceFactory(ServiceConformance):
    pass


class TestAForgottenRanker(RankerConformance):
    pass
"""


def test_a_kit_binding_without_an_optional_capability_skips_and_one_without_a_required_fixture_errors(
    pytester: pytest.Pytester,
) -> None:
    """Left at its default, ``replace_event_body`` skips the byte-flip test with its reason; a class that does
    not bind ``service_factory`` or ``ranker`` errors with a message naming the fixture to override."""
    pytester.makepyfile(test_bindings=_BINDINGS)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-rs", "-k", "flipped_byte or TestAForgottenRanker and test_deterministic"
    )
    result.assert_outcomes(skipped=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED * the backend cannot tamper with stored events",
            "*NotImplementedError: backend test classes must override the service_factory fixture",
            "*NotImplementedError: bind RankerConformance with a `ranker` fixture",
        ]
    )


def test_the_unchanged_check_lets_a_call_with_an_unnormalised_binding_reach_its_refusal() -> None:
    """``ServiceConformance.unchanged`` records what each call could change; a binding whose ids are not NFC
    has no scope, so its call goes straight to the service, which refuses it (-32603)."""
    clock = ManualClock()
    harness = Harness(with_policy(_services(SchedulingVault())(clock), ACCEPT), clock)
    harness.pending(A, make_key("kit-unchanged"))
    unnormalised = attrs.evolve(A, tenant_id="Ame\u0301lie")
    with ServiceConformance.unchanged(harness, A), pytest.raises(ProtocolError) as refused:
        harness.call(CAPTURE, capture_args(make_key("kit-not-nfc")), unnormalised)
    assert refused.value.code is JsonRpcCode.INTERNAL_ERROR


class _ClosingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__(secret=b"s" * 32)
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_store_wrapper_hands_scopes_secret_and_close_to_the_wrapped_store() -> None:
    """A service over a :class:`StoreWrapper` lists its scopes for maintenance and releases the store on close."""
    inner, clock = _ClosingStore(), ManualClock()
    wrapped = StoreWrapper(inner)
    service = MemoryService(store=wrapped, vault=InMemoryKeyVault(), policy=ACCEPT, clock=clock)
    Harness(service, clock).accepted(A, make_key("kit-wrapped"))  # the accept leaves the candidate key doomed
    assert wrapped.scopes() == inner.scopes() == [A.scope]
    assert wrapped.secret() == b"s" * 32
    assert MemoryAdmin(service).reap_keys() == 1  # found in the scope the wrapper listed
    service.close()
    assert inner.closed


_FAILING_BINDING = """
import pytest

from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance, StoreWrapper


class ShortSecretStore(StoreWrapper):
    def secret(self):
        return b"s" * 16


class TestAStoreWithAShortSecret(StoreConformance):
    @pytest.fixture
    def store(self):
        return ShortSecretStore(InMemoryStore())
"""

_CONFTESTS = {
    "no conftest": None,
    "a conftest that registers the package itself, then imports the kit": (
        'import pytest\n\npytest.register_assert_rewrite("engram_memory.testing")\n\nimport engram_memory.testing\n'
    ),
}


@pytest.mark.parametrize("conftest", list(_CONFTESTS))
def test_a_failing_kit_assertion_shows_its_values_in_an_integrators_run(
    pytester: pytest.Pytester, conftest: str
) -> None:
    """The kit registers its modules for assertion rewriting: in a separate pytest run (the kit imported
    as an installed library), a failed bare ``assert`` shows the values it compared, and warnings as errors
    (``-W error``, as this repository's own configuration has) find no PytestAssertRewriteWarning."""
    pytester.makepyfile(test_binding=_FAILING_BINDING)
    source = _CONFTESTS[conftest]
    if source is not None:
        pytester.makeconftest(source)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", "-k", "test_secret_is_32")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * assert 16 == 32", "E * +  where 16 = len(b'ssssssssssssssss')"])
    assert "PytestAssertRewriteWarning" not in result.stdout.str() + result.stderr.str()


class _FileVault(InMemoryKeyVault):
    """Keeps its keys in a file; ``lazy`` writes it only on ``close``, ``forgets_destroy`` only on ``seal``."""

    def __init__(self, path: Path, *, lazy: bool = False, forgets_destroy: bool = False) -> None:
        super().__init__()
        self.path, self.lazy, self.forgets_destroy = path, lazy, forgets_destroy
        if path.exists():
            self._keys = {ref: bytes.fromhex(key) for ref, key in json.loads(path.read_text()).items()}

    def _write(self) -> None:
        self.path.write_text(json.dumps({ref: key.hex() for ref, key in self._keys.items()}))

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        envelope = super().seal(context, plaintext)
        if not self.lazy:
            self._write()
        return envelope

    def destroy(self, *key_refs: str) -> None:
        super().destroy(*key_refs)
        if not (self.lazy or self.forgets_destroy):
            self._write()

    def close(self) -> None:
        self._write()


def _key_material(vault: KeyVault, key_ref: str) -> bytes:
    assert isinstance(vault, _FileVault)
    return vault._keys[key_ref]  # the test's own vault


class TestAFileVaultThatWritesAtOnce(KeyVaultConformance):
    @pytest.fixture
    def vault(self, tmp_path: Path) -> KeyVault:
        return _FileVault(tmp_path / "keys.json")

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Reopen | None:
        return lambda: _FileVault(tmp_path / "keys.json")

    @pytest.fixture
    def key_material(self) -> KeyMaterial | None:
        return _key_material


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lazy": True}, "data key is unknown or destroyed"),  # a key sealed before the crash is gone
        ({"forgets_destroy": True}, "DID NOT RAISE"),  # the destroyed key opens again
    ],
    ids=["writes-only-on-close", "destroy-not-written"],
)
def test_a_vault_that_writes_late_fails_the_restart_check(
    tmp_path: Path, options: dict[str, bool], message: str
) -> None:
    path = tmp_path / "keys.json"
    kit = KeyVaultConformance()
    with pytest.raises((pytest.fail.Exception, AssertionError, KeyUnavailableError), match=message):
        kit.test_sealed_keys_and_destructions_survive_a_restart(
            _FileVault(path, **options), lambda: _FileVault(path, **options), None
        )


def test_one_key_behind_every_ref_fails_the_fresh_key_check() -> None:
    """What ``key_material`` reveals of a vault that seals everything under one key, whatever the ref."""
    one_key: KeyMaterial = lambda _vault, _ref: b"k" * 32  # noqa: E731 - the revealed bytes of such a vault
    with pytest.raises(AssertionError, match="same key bytes"):
        KeyVaultConformance().test_every_seal_uses_a_fresh_key_and_nonce(InMemoryKeyVault(), one_key)


class _KeyCarryingVault(InMemoryKeyVault):
    """Appends the data key to the ciphertext it stores (and strips it again before opening)."""

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        envelope = super().seal(context, plaintext)
        return attrs.evolve(envelope, ciphertext=envelope.ciphertext + self._keys[envelope.key_ref])

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        return super().open(attrs.evolve(envelope, ciphertext=envelope.ciphertext[:-32]), context)


def _memory_key_material(vault: KeyVault, key_ref: str) -> bytes:
    assert isinstance(vault, InMemoryKeyVault)
    return vault._keys[key_ref]  # the test's own vault


def test_a_vault_whose_envelope_carries_its_key_fails_the_kit() -> None:
    """``destroy`` cannot erase a key that every copy of the store holds beside its data."""
    kit = KeyVaultConformance()
    kit.test_the_envelope_does_not_carry_its_key(InMemoryKeyVault(), _memory_key_material)  # the honest vault passes
    with pytest.raises(AssertionError, match="the envelope carries its data key"):
        kit.test_the_envelope_does_not_carry_its_key(_KeyCarryingVault(), _memory_key_material)


def test_a_soft_delete_fails_with_key_material_and_is_a_named_skip_without() -> None:
    kit = KeyVaultConformance()
    vault = SoftDeletingVault()

    def material(_vault: KeyVault, key_ref: str) -> bytes:
        return vault._keys.get(key_ref) or vault.kept[key_ref]  # the storage, soft-deleted keys included

    with pytest.raises(pytest.fail.Exception, match=r"a destroyed key's 32 bytes are still in the vault's storage"):
        kit.test_a_destroyed_key_leaves_the_storage(vault, None, material)
    with pytest.raises(pytest.skip.Exception, match="no key_material: nothing checks"):
        kit.test_a_destroyed_key_leaves_the_storage(vault, None, None)


class _CountingFileVault(_FileVault):
    """Names keys from a counter that starts again at 1 in every instance (a restart reuses refs)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.issued = 0

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        envelope = InMemoryKeyVault.seal(self, context, plaintext)
        self.issued += 1
        ref = f"key_{self.issued:08d}"
        self._keys[ref] = self._keys.pop(envelope.key_ref)
        self._write()
        return attrs.evolve(envelope, key_ref=ref)


def test_a_vault_that_reuses_key_refs_after_a_restart_fails_the_restart_check(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    with pytest.raises(AssertionError, match="a restarted vault reused a key ref"):
        KeyVaultConformance().test_sealed_keys_and_destructions_survive_a_restart(
            _CountingFileVault(path), lambda: _CountingFileVault(path), None
        )
