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

__all__ = ["open_sealed", "seal_fresh"]

_NONCE_BYTES: Final = 12


def seal_fresh(context: str, plaintext: bytes) -> tuple[bytes, SealedEnvelope]:
    """Encrypt under a new 256-bit key and a random 96-bit nonce; return ``(key, envelope)``."""
    key = AESGCM.generate_key(bit_length=256)
    nonce = secrets.token_bytes(_NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, plaintext, context.encode("utf-8"))
    key_ref = "key_" + secrets.token_hex(16)
    return key, SealedEnvelope(key_ref=key_ref, nonce=nonce, ciphertext=ciphertext)


def open_sealed(key: bytes, envelope: SealedEnvelope, context: str) -> bytes:
    """Decrypt an envelope with its key.

    Raises:
        SealIntegrityError: the ciphertext, nonce or context does not authenticate.
    """
    try:
        return AESGCM(key).decrypt(envelope.nonce, envelope.ciphertext, context.encode("utf-8"))
    except InvalidTag as exc:
        raise SealIntegrityError("sealed envelope failed authentication") from exc
