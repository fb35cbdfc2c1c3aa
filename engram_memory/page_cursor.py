"""Opaque, tamper-evident search page cursors (DESIGN D10).

A cursor is ``base64url(payload ‖ mac)`` without padding, where ``payload`` is the canonical JSON
``{"v": 1, "o": offset, "va": valid_as_of, "sa": system_as_of, "od": ordering_digest}`` and
``mac = HMAC-SHA256(store secret, PAGE_CURSOR domain ‖ binding_digest ‖ payload)``. Anything but
an untouched cursor issued for the same binding digest decodes to ``STALE_PAGE``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from datetime import timedelta
from typing import Final

import attrs

from engram_memory.canonical import CanonicalError, Domain, canonical_bytes, format_cursor, parse_cursor
from engram_memory.errors import EngramError, ErrorCode

__all__ = ["PageCursor", "PageCursorCodec", "lifetime_ms"]

_CURSOR_VERSION: Final = 1
_MAC_BYTES: Final = 32
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]+")


@attrs.frozen(kw_only=True)
class PageCursor:
    """What a page cursor carries: where the next page starts and the pins it was ranked at."""

    offset: int
    valid_as_of: int
    system_as_of: int
    ordering_digest: str


def lifetime_ms(lifetime: object) -> int | None:
    """A ``page_cursor_lifetime`` in whole milliseconds (``None`` stays ``None``: no expiry).

    Raises:
        TypeError: ``lifetime`` is neither a ``timedelta`` nor ``None``.
        ValueError: ``lifetime`` is shorter than one millisecond.
    """
    if lifetime is None:
        return None
    if not isinstance(lifetime, timedelta):
        error = TypeError("page_cursor_lifetime must be a datetime.timedelta or None")
        error.add_note(f"got {type(lifetime).__name__}")
        raise error
    milliseconds = lifetime // timedelta(milliseconds=1)
    if milliseconds < 1:
        raise ValueError("page_cursor_lifetime must be at least one millisecond")
    return milliseconds


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _b64decode(text: str) -> bytes:
    if _BASE64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


def _written_types(cursor: PageCursor) -> bool:
    """Whether the pins have the types the codec writes (re-encoding keeps ``"70"`` or ``true`` for ``70``)."""
    return type(cursor.offset) is int and type(cursor.valid_as_of) is int and type(cursor.ordering_digest) is str


def _stale(detail: str) -> EngramError:
    return EngramError(ErrorCode.STALE_PAGE, detail=detail)


class PageCursorCodec:
    """Encodes and verifies page cursors with an HMAC-SHA256 under the store's secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, binding_digest: str, payload: bytes) -> bytes:
        message = Domain.PAGE_CURSOR.prefix + binding_digest.encode("ascii") + payload
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    @staticmethod
    def _payload(cursor: PageCursor) -> bytes:
        return canonical_bytes(
            {
                "v": _CURSOR_VERSION,
                "o": cursor.offset,
                "va": cursor.valid_as_of,
                "sa": format_cursor(cursor.system_as_of),
                "od": cursor.ordering_digest,
            }
        )

    def encode(self, cursor: PageCursor, binding_digest: str) -> str:
        """The opaque cursor string for ``cursor``, bound to ``binding_digest``."""
        payload = self._payload(cursor)
        return _b64encode(payload + self._mac(binding_digest, payload))

    def encoded_length(self, cursor: PageCursor) -> int:
        """``len(self.encode(cursor, binding_digest))`` for any binding digest (no MAC computed)."""
        return (4 * (len(self._payload(cursor)) + _MAC_BYTES) + 2) // 3

    def decode(self, token: str, binding_digest: str) -> PageCursor:
        """Verify and decode a cursor issued for the same binding digest.

        Raises:
            EngramError: ``STALE_PAGE`` for anything but an untouched cursor of this binding.
        """
        try:
            raw = _b64decode(token)
        except (ValueError, binascii.Error, UnicodeError) as exc:
            raise _stale("page cursor is not base64url") from exc
        if len(raw) <= _MAC_BYTES:
            raise _stale("page cursor too short")
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(binding_digest, payload)):
            raise _stale("page cursor MAC does not verify for this request")
        # the MAC verifies: written by this codec (or forged with the secret); re-encoding checks keys and form
        try:
            fields = json.loads(payload)
            cursor = PageCursor(
                offset=fields["o"],
                valid_as_of=fields["va"],
                system_as_of=parse_cursor(fields["sa"]),
                ordering_digest=fields["od"],
            )
            if self._payload(cursor) != payload or not _written_types(cursor):
                raise ValueError("payload is not in canonical cursor form")  # noqa: TRY301 - one refusal path
        except (ValueError, KeyError, TypeError, CanonicalError) as exc:
            raise _stale("page cursor payload is malformed") from exc
        return cursor
