"""``KeyVaultConformance``: the behaviour every :class:`~engram_memory.ports.KeyVault` must show.

Bind it with one fixture::

    class TestMyVault(KeyVaultConformance):
        @pytest.fixture
        def vault(self) -> MyVault:
            return MyVault(...)

Capability fixtures: ``key_material`` may return a callable that reveals the raw key bytes of a
``key_ref`` from the vault's storage (test-only access) and raises :class:`LookupError` when the
storage holds nothing of that key; the suite then also proves the key never appears in ``repr``
or exception text, nor in the envelope a Store keeps, and that a destroyed key is gone from the
storage, not only refused by ``open`` (a "soft delete" would leave forgotten content recoverable
from a copy of the vault). By default it returns ``None``: only plaintext leaks are checked, and
the two tests that need it say so as skips.
``complete_destruction`` must return a callable that carries out scheduled destructions (drain a
queue, advance a fake clock) when the vault's ``destroys_synchronously`` is false: the suite then
checks that destroyed keys are gone, and fails a scheduling vault that does not provide it.
``reopen`` may return a callable that opens another vault over the same storage while the vault
under test is still open (as after a crash of its process): the suite then checks that a key is
durable once ``seal`` returns and a destruction once ``destroy`` (and its completion) returns,
and that a reopened vault hands out key refs no earlier seal did. A vault that keeps its keys
across restarts must bind it; ``None`` (the default) skips that check.
One test runs several threads on one vault; none asserts how long anything takes.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import attrs
import pytest

from engram_memory.errors import KeyUnavailableError, SealIntegrityError, StoreUnavailableError
from engram_memory.ports import KeyVault, SealedEnvelope

__all__ = ["CompleteDestruction", "KeyMaterial", "KeyVaultConformance", "Reopen", "finish_destruction"]

KeyMaterial = Callable[[KeyVault, str], bytes]
"""Reveals the raw key bytes behind a key ref, or raises LookupError (only a test binding can provide this)."""
CompleteDestruction = Callable[[KeyVault], None]
"""Carries out a scheduling vault's pending destructions (only a test binding can provide this)."""
Reopen = Callable[[], KeyVault]
"""Opens another vault over the storage of the vault under test (a restart)."""

CONTEXT = "sha256:" + "ab" * 32
OTHER_CONTEXT = "sha256:" + "cd" * 32
PLAINTEXT = b'{"text":"zqkeyvaultplaintext conformance"}'


def _assert_gone_from_storage(vault: KeyVault, key_material: KeyMaterial | None, key_ref: str) -> None:
    """With ``key_material``: the vault's storage holds nothing of a destroyed key (``LookupError``)."""
    if key_material is None:
        return
    try:
        left: object = key_material(vault, key_ref)
    except LookupError:
        return
    if not isinstance(left, bytes) or not left:
        pytest.fail(f"key_material must raise LookupError for a key the storage does not hold; it returned {left!r}")
    pytest.fail(f"a destroyed key's {len(left)} bytes are still in the vault's storage (a soft delete?)")


def finish_destruction(vault: KeyVault, complete_destruction: CompleteDestruction | None) -> None:
    """Carry out a scheduling vault's destructions, so a kit can check them; fail if it cannot.

    A vault that destroys synchronously needs nothing. One that schedules destruction must come
    with ``complete_destruction``: a kit never skips a check it could not make.
    """
    if vault.destroys_synchronously:
        return
    if complete_destruction is None:
        pytest.fail("a vault that schedules destruction must provide the complete_destruction fixture")
    complete_destruction(vault)


_THREADS = 4
"""Threads sharing one vault in the concurrency test."""
_SEALS = 12
"""Envelopes each thread seals; every third is destroyed by its thread."""
_ATTEMPTS = 200
"""Attempts at a call the vault refuses with ``StoreUnavailableError`` (a retriable outage)."""

_T = TypeVar("_T")


def _retried(call: Callable[[], _T]) -> _T:
    """``call()``, again while the vault answers ``StoreUnavailableError`` (as the service's caller would)."""
    for _ in range(_ATTEMPTS - 1):
        try:
            return call()
        except StoreUnavailableError:
            time.sleep(0)
    return call()


def _close(vault: KeyVault) -> None:
    """``vault.close()`` when the vault has one (it is optional on the port)."""
    close = getattr(vault, "close", None)
    if callable(close):
        close()


class _Sealers:
    """Threads that seal, open and destroy at once on one vault, and what each sealed.

    Each thread seals ``_SEALS`` plaintexts of its own, opens each at once, and destroys every
    third key (one call each, then a last call with several of them and an unknown ref); the
    envelopes it keeps are published, and the thread opens the latest ones the other threads
    published. For a vault that destroys synchronously, a destroyed envelope must no longer open
    on its thread. A call the vault refuses with ``StoreUnavailableError`` is retried.
    """

    def __init__(self, vault: KeyVault) -> None:
        self.vault = vault
        self.kept: list[tuple[int, SealedEnvelope, str, bytes]] = []
        self.destroyed: list[tuple[SealedEnvelope, str]] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._start = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(_THREADS)]

    def run(self) -> None:
        for thread in self._threads:
            thread.start()
        self._start.set()
        for thread in self._threads:
            thread.join()

    def _run(self, n: int) -> None:
        self._start.wait()
        try:
            self._seal_open_destroy(n)
        except BaseException as exc:  # noqa: BLE001 - every failure is reported by the test
            with self._lock:
                self.failures.append(f"thread {n}: {exc!r}")

    def _seal_open_destroy(self, n: int) -> None:
        doomed: list[tuple[SealedEnvelope, str]] = []
        for index in range(_SEALS):
            context = f"sha256:{n:02x}{index:02x}" + "ef" * 30
            plaintext = f'{{"thread":{n},"seal":{index}}}'.encode()
            envelope = _retried(lambda: self.vault.seal(context, plaintext))  # noqa: B023 - called at once
            time.sleep(0)  # let the other threads run between the steps
            assert _retried(lambda: self.vault.open(envelope, context)) == plaintext, (  # noqa: B023
                "an envelope opens right after its seal"
            )
            if index % 3 == 0:
                doomed.append((envelope, context))
                if index < _SEALS - 3:
                    _retried(lambda: self.vault.destroy(envelope.key_ref))  # noqa: B023
                    if self.vault.destroys_synchronously:
                        with pytest.raises(KeyUnavailableError):
                            _retried(lambda: self.vault.open(envelope, context))  # noqa: B023
            else:
                with self._lock:
                    self.kept.append((n, envelope, context, plaintext))
                    others = [item[1:] for item in self.kept if item[0] != n][-3:]
                for other, other_context, other_plaintext in others:
                    opened = _retried(lambda: self.vault.open(other, other_context))  # noqa: B023
                    assert opened == other_plaintext, "another thread's envelope opens"
            time.sleep(0)
        refs = [envelope.key_ref for envelope, _ in doomed]
        _retried(lambda: self.vault.destroy(*refs, f"{refs[0]}-unknown"))
        with self._lock:
            self.destroyed += doomed


def _flip(data: bytes, position: int) -> bytes:
    mutated = bytearray(data)
    mutated[position] ^= 0x01
    return bytes(mutated)


def _spellings(secret: bytes) -> list[bytes]:
    return [secret, secret.hex().encode(), base64.b64encode(secret), repr(secret).encode()]


class KeyVaultConformance:
    """The KeyVault suite. Subclass it and override the ``vault`` fixture."""

    @pytest.fixture
    def vault(self) -> KeyVault:
        """The vault under test (fresh for every test)."""
        raise NotImplementedError("backend test classes must override the vault fixture")

    @pytest.fixture
    def key_material(self) -> KeyMaterial | None:
        """Capability: reveals raw key bytes from storage so the suite can look for them; ``None`` by default.

        The callable must raise :class:`LookupError` (``KeyError`` is one) for a key the storage
        does not hold: the suite checks that a destroyed key is gone, not only refused by ``open``.
        """
        return None

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        """Capability, required for a vault that schedules destruction; ``None`` by default."""
        return None

    @pytest.fixture
    def reopen(self) -> Reopen | None:
        """Capability: opens the same storage again; ``None`` (a vault that keeps nothing across restarts)."""
        return None

    def test_seal_then_open_round_trips(self, vault: KeyVault) -> None:
        """Opening with the sealing context returns the exact plaintext."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        assert vault.open(envelope, CONTEXT) == PLAINTEXT

    def test_an_empty_plaintext_round_trips(self, vault: KeyVault) -> None:
        """Zero bytes seal and open like any other plaintext."""
        assert vault.open(vault.seal(CONTEXT, b""), CONTEXT) == b""

    def test_the_ciphertext_does_not_contain_the_plaintext(self, vault: KeyVault) -> None:
        """The envelope's bytes never hold the plaintext in clear."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        assert PLAINTEXT not in envelope.ciphertext
        assert b"zqkeyvaultplaintext" not in envelope.ciphertext + envelope.nonce
        assert b"zqkeyvaultplaintext" not in repr(envelope).encode()

    def test_a_wrong_context_fails_integrity(self, vault: KeyVault) -> None:
        """Opening with another context raises SealIntegrityError."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        with pytest.raises(SealIntegrityError):
            vault.open(envelope, OTHER_CONTEXT)

    @pytest.mark.parametrize("position", [0, 7, -1])
    def test_tampered_ciphertext_fails_integrity(self, vault: KeyVault, position: int) -> None:
        """A flipped ciphertext bit raises SealIntegrityError."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        tampered = attrs.evolve(envelope, ciphertext=_flip(envelope.ciphertext, position))
        with pytest.raises(SealIntegrityError):
            vault.open(tampered, CONTEXT)

    def test_a_tampered_nonce_fails_integrity(self, vault: KeyVault) -> None:
        """A flipped nonce bit raises SealIntegrityError."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        tampered = attrs.evolve(envelope, nonce=_flip(envelope.nonce, 0))
        with pytest.raises(SealIntegrityError):
            vault.open(tampered, CONTEXT)

    @pytest.mark.parametrize("length", [0, 7, 11, 13, 200])
    def test_a_nonce_of_another_length_fails_integrity(self, vault: KeyVault, length: int) -> None:
        """A nonce cut short or extended raises SealIntegrityError (never another exception)."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        nonce = (envelope.nonce * 20)[:length]
        with pytest.raises(SealIntegrityError):
            vault.open(attrs.evolve(envelope, nonce=nonce), CONTEXT)

    def test_a_truncated_ciphertext_fails_integrity(self, vault: KeyVault) -> None:
        """A ciphertext cut short raises SealIntegrityError (never another exception)."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        with pytest.raises(SealIntegrityError):
            vault.open(attrs.evolve(envelope, ciphertext=envelope.ciphertext[:-1]), CONTEXT)

    def test_another_keys_envelope_does_not_open(self, vault: KeyVault) -> None:
        """Swapping the key ref of an envelope for another live key fails integrity."""
        first = vault.seal(CONTEXT, PLAINTEXT)
        second = vault.seal(CONTEXT, PLAINTEXT)
        with pytest.raises(SealIntegrityError):
            vault.open(attrs.evolve(first, key_ref=second.key_ref), CONTEXT)

    def test_a_destroyed_key_is_unavailable(
        self,
        vault: KeyVault,
        complete_destruction: CompleteDestruction | None,
        key_material: KeyMaterial | None,
    ) -> None:
        """After ``destroy`` (and, for a scheduling vault, its completion) the envelope no longer opens.

        With ``key_material``, the key's bytes are gone from the vault's storage too.
        """
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        if key_material is not None:
            assert key_material(vault, envelope.key_ref), "key_material reveals nothing of a live key"
        vault.destroy(envelope.key_ref)
        finish_destruction(vault, complete_destruction)
        with pytest.raises(KeyUnavailableError):
            vault.open(envelope, CONTEXT)
        _assert_gone_from_storage(vault, key_material, envelope.key_ref)

    def test_a_destroyed_key_leaves_the_storage(
        self,
        vault: KeyVault,
        complete_destruction: CompleteDestruction | None,
        key_material: KeyMaterial | None,
    ) -> None:
        """Capability ``key_material``: a destroyed key's bytes are gone from storage, not only refused.

        Skipped, saying so, without it: a vault that marks keys deleted and keeps their bytes (a
        "soft delete") passes every other test and leaves forgotten content readable from a copy.
        """
        if key_material is None:
            pytest.skip("no key_material: nothing checks that destroyed keys leave the storage (a soft delete passes)")
        envelopes = [vault.seal(CONTEXT, PLAINTEXT) for _ in range(3)]
        for envelope in envelopes:
            assert key_material(vault, envelope.key_ref), "key_material reveals nothing of a live key"
        vault.destroy(envelopes[0].key_ref, envelopes[1].key_ref)
        finish_destruction(vault, complete_destruction)
        for envelope in envelopes[:2]:
            _assert_gone_from_storage(vault, key_material, envelope.key_ref)
        assert key_material(vault, envelopes[2].key_ref), "destroying two keys took a third one's bytes"

    def test_the_envelope_does_not_carry_its_key(self, vault: KeyVault, key_material: KeyMaterial | None) -> None:
        """Capability ``key_material``: no spelling of the data key is in the envelope a Store keeps.

        The envelope is stored beside the data; a key carried in it (appended to the ciphertext,
        folded into the ref or the nonce) survives ``destroy`` in every copy of the store.
        """
        if key_material is None:
            pytest.skip("no key_material: nothing checks that an envelope does not carry its key")
        for plaintext in (PLAINTEXT, b"", bytes(range(256)) * 4):
            envelope = vault.seal(CONTEXT, plaintext)
            stored = envelope.key_ref.encode() + b"\n" + envelope.nonce + b"\n" + envelope.ciphertext
            key = key_material(vault, envelope.key_ref)
            for spelling in _spellings(key):
                assert spelling not in stored, "the envelope carries its data key: destroy cannot erase it"

    def test_destroying_one_key_keeps_the_others(self, vault: KeyVault) -> None:
        """Destroying a key leaves envelopes sealed under other keys readable."""
        doomed = vault.seal(CONTEXT, PLAINTEXT)
        kept = vault.seal(OTHER_CONTEXT, b"kept")
        vault.destroy(doomed.key_ref)
        assert vault.open(kept, OTHER_CONTEXT) == b"kept"

    def test_one_call_destroys_several_keys(
        self, vault: KeyVault, complete_destruction: CompleteDestruction | None
    ) -> None:
        """``destroy(a, b, unknown)`` destroys ``a`` and ``b``, ignores ``unknown`` and keeps the rest."""
        first, second, kept = (vault.seal(CONTEXT, PLAINTEXT) for _ in range(3))
        vault.destroy(first.key_ref, second.key_ref, "key_that_never_existed")
        vault.destroy()
        finish_destruction(vault, complete_destruction)
        assert vault.open(kept, CONTEXT) == PLAINTEXT
        for envelope in (first, second):
            with pytest.raises(KeyUnavailableError):
                vault.open(envelope, CONTEXT)

    def test_an_unknown_key_is_unavailable(self, vault: KeyVault) -> None:
        """An envelope naming a key the vault never made raises KeyUnavailableError."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        with pytest.raises(KeyUnavailableError):
            vault.open(attrs.evolve(envelope, key_ref=envelope.key_ref + "0"), CONTEXT)

    def test_destroy_is_idempotent(
        self, vault: KeyVault, complete_destruction: CompleteDestruction | None, key_material: KeyMaterial | None
    ) -> None:
        """Destroying again, before or after the destruction completes, or an unknown key, never revives a key.

        The service destroys a key again when it retries (doomed keys, a replayed forget), so a
        repeated ``destroy`` must leave the key destroyed and the other keys readable.
        """
        doomed = vault.seal(CONTEXT, PLAINTEXT)
        kept = vault.seal(OTHER_CONTEXT, b"kept")
        vault.destroy(doomed.key_ref)
        vault.destroy(doomed.key_ref)
        vault.destroy("key_that_never_existed")
        finish_destruction(vault, complete_destruction)
        with pytest.raises(KeyUnavailableError):
            vault.open(doomed, CONTEXT)
        vault.destroy(doomed.key_ref)  # once more, after the destruction completed
        finish_destruction(vault, complete_destruction)
        with pytest.raises(KeyUnavailableError):
            vault.open(doomed, CONTEXT)
        _assert_gone_from_storage(vault, key_material, doomed.key_ref)
        assert vault.open(kept, OTHER_CONTEXT) == b"kept"

    def test_concurrent_seals_opens_and_destroys_keep_every_key_apart(
        self, vault: KeyVault, complete_destruction: CompleteDestruction | None
    ) -> None:
        """Four threads seal, open and destroy at once: distinct keys, and each envelope opens until destroyed.

        Every envelope opens right after its seal and, from other threads, while its key lives;
        afterwards every key ref is distinct, every kept envelope still opens to its plaintext and
        no destroyed one opens (after the scheduled destruction, for a vault that schedules it).
        """
        sealers = _Sealers(vault)
        sealers.run()
        assert sealers.failures == [], sealers.failures
        refs = [item[1].key_ref for item in sealers.kept] + [envelope.key_ref for envelope, _ in sealers.destroyed]
        assert len(refs) == _THREADS * _SEALS
        assert len(set(refs)) == len(refs), "two seals returned the same key ref"
        finish_destruction(vault, complete_destruction)
        for _, envelope, context, plaintext in sealers.kept:
            assert vault.open(envelope, context) == plaintext
        for envelope, context in sealers.destroyed:
            with pytest.raises(KeyUnavailableError):
                vault.open(envelope, context)

    def test_every_seal_uses_a_fresh_key_and_nonce(self, vault: KeyVault, key_material: KeyMaterial | None) -> None:
        """Two seals of the same plaintext give different key refs, nonces and ciphertexts.

        With ``key_material``, the keys' bytes differ too: a vault that seals everything under one
        key, whatever ref it names, destroys nothing when it destroys a ref.
        """
        first = vault.seal(CONTEXT, PLAINTEXT)
        second = vault.seal(CONTEXT, PLAINTEXT)
        assert first.key_ref != second.key_ref
        assert first.nonce != second.nonce
        assert first.ciphertext != second.ciphertext
        if key_material is not None:
            assert key_material(vault, first.key_ref) != key_material(vault, second.key_ref), (
                "two seals used the same key bytes under two refs"
            )

    def test_sealed_keys_and_destructions_survive_a_restart(
        self, vault: KeyVault, reopen: Reopen | None, complete_destruction: CompleteDestruction | None
    ) -> None:
        """Storage opened again, as after a crash, opens every envelope sealed before and no destroyed one.

        A key must be durable before ``seal`` returns (a record sealed under it is committed next),
        and a destruction once ``destroy`` and its completion return (a forget answers then). The
        storage is reopened while the vault under test is still open (it is never closed, as a
        crashed process's is not), once right after a destruction and once right after a seal, so
        neither call may count on a later one, nor on ``close``, to write it down.
        """
        if reopen is None:
            pytest.skip("the vault does not bind reopen (it keeps nothing across restarts)")
        doomed = vault.seal(CONTEXT, b"doomed")
        kept = vault.seal(OTHER_CONTEXT, b"kept")
        vault.destroy(doomed.key_ref)
        finish_destruction(vault, complete_destruction)
        after_destroy = reopen()
        try:
            with pytest.raises(KeyUnavailableError):
                after_destroy.open(doomed, CONTEXT)  # a destroyed key does not come back
            assert after_destroy.open(kept, OTHER_CONTEXT) == b"kept", "a key sealed before a crash opens after it"
            fresh = after_destroy.seal(CONTEXT, b"fresh")  # refs must stay unique across restarts
            assert fresh.key_ref not in {doomed.key_ref, kept.key_ref}, "a restarted vault reused a key ref"
            assert after_destroy.open(kept, OTHER_CONTEXT) == b"kept", "a seal after a restart broke an older key"
            assert after_destroy.open(fresh, CONTEXT) == b"fresh"
        finally:
            _close(after_destroy)
        late = vault.seal(CONTEXT, PLAINTEXT)
        after_seal = reopen()
        try:
            assert after_seal.open(late, CONTEXT) == PLAINTEXT, "a key sealed just before a crash opens after it"
        finally:
            _close(after_seal)

    def test_nothing_secret_appears_in_repr_or_errors(self, vault: KeyVault, key_material: KeyMaterial | None) -> None:
        """Neither plaintext nor key material shows in reprs or exception text."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        texts = [repr(vault), str(vault), repr(envelope), str(envelope)]
        with pytest.raises(SealIntegrityError) as integrity:
            vault.open(envelope, OTHER_CONTEXT)
        texts += [str(integrity.value), repr(integrity.value), *getattr(integrity.value, "__notes__", [])]
        secrets = [b"zqkeyvaultplaintext"]
        if key_material is not None:
            secrets += _spellings(key_material(vault, envelope.key_ref))
        vault.destroy(envelope.key_ref)
        if vault.destroys_synchronously:
            with pytest.raises(KeyUnavailableError) as unavailable:
                vault.open(envelope, CONTEXT)
            texts += [str(unavailable.value), repr(unavailable.value)]
        blob = "\n".join(texts).encode()
        for secret in secrets:
            assert secret not in blob

    def test_the_envelope_is_a_plain_value(self, vault: KeyVault) -> None:
        """``seal`` returns a SealedEnvelope with bytes fields (storable by any Store)."""
        envelope = vault.seal(CONTEXT, PLAINTEXT)
        assert isinstance(envelope, SealedEnvelope)
        assert isinstance(envelope.key_ref, str)
        assert envelope.key_ref
        assert isinstance(envelope.nonce, bytes)
        assert isinstance(envelope.ciphertext, bytes)
