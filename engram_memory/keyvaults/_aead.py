"""The data-key cipher every reference vault uses: AES-256-GCM, a fresh key per sealed item.

Associated data is the UTF-8 ``context`` (a digest binding scope and id), so an envelope opens only
for the item it was sealed for. Vaults differ only in how they keep the key.
"""

from __future__ import annotations

import secrets
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram_memory.errors import SealIntegrityError
from engram_memory.ports import SealedEnvelope

__all__ = ["new_key", "open_sealed", "seal_fresh", "seal_with"]

_NONCE_BYTES: Final = 12


def new_key() -> tuple[str, bytes]:
    """A fresh ``(key_ref, 256-bit key)``; the ref is random and says nothing about the key."""
    return "key_" + secrets.token_hex(16), AESGCM.generate_key(bit_length=256)


def seal_with(key_ref: str, key: bytes, context: str, plaintext: bytes) -> SealedEnvelope:
    """Encrypt under ``key`` with a random 96-bit nonce, binding ``context`` as associated data."""
    nonce = secrets.token_bytes(_NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, plaintext, context.encode("utf-8"))
    return SealedEnvelope(key_ref=key_ref, nonce=nonce, ciphertext=ciphertext)


def seal_fresh(context: str, plaintext: bytes) -> tuple[bytes, SealedEnvelope]:
    """Encrypt under a new key (:func:`new_key`); return ``(key, envelope)``."""
    key_ref, key = new_key()
    return key, seal_with(key_ref, key, context, plaintext)


def open_sealed(key: bytes, envelope: SealedEnvelope, context: str) -> bytes:
    """Decrypt an envelope with its key.

    Raises:
        SealIntegrityError: the ciphertext, nonce or context does not authenticate.
    """
    if len(envelope.nonce) != _NONCE_BYTES:  # cryptography raises ValueError outside 8..128 bytes
        raise SealIntegrityError("sealed envelope failed authentication")
    try:
        return AESGCM(key).decrypt(envelope.nonce, envelope.ciphertext, context.encode("utf-8"))
    except InvalidTag as exc:
        raise SealIntegrityError("sealed envelope failed authentication") from exc
