"""``InMemoryKeyVault``: AES-256-GCM with a fresh key per sealed item, keys in process memory."""

from __future__ import annotations

import threading

from engram_memory.errors import KeyUnavailableError
from engram_memory.keyvaults._aead import open_sealed, seal_fresh
from engram_memory.ports import SealedEnvelope

__all__ = ["InMemoryKeyVault"]


class InMemoryKeyVault:
    """The in-memory reference :class:`~engram_memory.ports.KeyVault`.

    Every :meth:`seal` draws a new 256-bit key and a random 96-bit nonce and binds ``context`` as
    associated data. :meth:`destroy` drops the key: every envelope sealed under it is gone.
    Keys never appear in ``repr`` or exception text.
    """

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InMemoryKeyVault(keys={len(self._keys)})"

    @property
    def destroys_synchronously(self) -> bool:
        """Destruction is immediate."""
        return True

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        """Encrypt under a fresh key bound to ``context``."""
        key, envelope = seal_fresh(context, plaintext)
        with self._lock:
            self._keys[envelope.key_ref] = key
        return envelope

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        """Decrypt; a missing key or a failed tag is a typed error."""
        with self._lock:
            key = self._keys.get(envelope.key_ref)
        if key is None:
            raise KeyUnavailableError("data key is unknown or destroyed")
        return open_sealed(key, envelope, context)

    def destroy(self, *key_refs: str) -> None:
        """Forget the keys (no-op for those already gone)."""
        with self._lock:
            for key_ref in key_refs:
                self._keys.pop(key_ref, None)

    def holds(self, key_ref: str) -> bool:
        """Whether the key still exists (for tests and audits)."""
        with self._lock:
            return key_ref in self._keys
