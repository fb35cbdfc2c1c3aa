"""Canonical bytes assembled from parts equal the bytes of the whole value."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.canonical import (
    ZERO_DIGEST,
    CanonicalError,
    Domain,
    canonical_array,
    canonical_bytes,
    canonical_object,
    digest,
    receipt_digest,
    sealed_receipt,
)
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.page_cursor import PageCursor, PageCursorCodec
from engram_memory.ports import RankedHit
from engram_memory.records import record_forms
from engram_memory.results import RecordPacket

_leaves = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(-1e6, 1e6) | st.text(max_size=6)
_values = st.recursive(
    _leaves,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=10,
)
_ascii_keys = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=8)
_record_keys = st.sampled_from(
    ["record_digest", "record_id", "record_e", "record_digest0", "record_ic", "recorded_at", "a", "z", "é", "", "r"]
)


def _canonical_or_none(value: Any) -> bytes | None:
    try:
        return canonical_bytes(value)
    except CanonicalError:
        return None


@settings(max_examples=300)
@given(st.dictionaries(_ascii_keys, _values, max_size=6))
def test_canonical_object_equals_canonical_bytes_of_the_object(value: dict[str, Any]) -> None:
    expected = _canonical_or_none(value)
    if expected is not None:
        assert canonical_object({key: canonical_bytes(item) for key, item in value.items()}) == expected
        assert canonical_array(canonical_bytes(item) for item in value.values()) == canonical_bytes(
            list(value.values())
        )


def test_canonical_object_refuses_keys_that_are_not_ascii() -> None:
    with pytest.raises(CanonicalError):
        canonical_object({"é": b"1"})
    assert canonical_object({}) == b"{}"


@settings(max_examples=400)
@given(st.dictionaries(_record_keys | _ascii_keys, _values, max_size=7))
def test_record_forms_are_the_digest_form_and_the_whole_record(record: dict[str, Any]) -> None:
    rest = {key: item for key, item in record.items() if key not in {"record_id", "record_digest"}}
    expected = (_canonical_or_none(rest), _canonical_or_none(record))
    if None in expected:
        with pytest.raises(CanonicalError):
            record_forms(record)
    else:
        assert record_forms(record) == expected


@given(
    record=st.dictionaries(_ascii_keys, _values, max_size=4),
    removed=st.lists(st.text(max_size=5), max_size=3),
    score=st.floats(0, 1) | st.just(1.0),
    rank=st.integers(1, 2000),
)
def test_packet_bytes_equal_the_packet_json(
    record: dict[str, Any], removed: list[str], score: float, rank: int
) -> None:
    from engram_memory.read_path import _packet_bytes  # noqa: PLC0415 - private helper under test

    packet = RecordPacket(
        record=record, redacted_fields=tuple(removed), redaction_receipt_digest="sha256:0", score=score, rank=rank
    )
    expected = _canonical_or_none(packet.to_json())
    if expected is not None:
        assert _packet_bytes(packet, canonical_bytes(record)) == expected


@pytest.mark.parametrize("plain", [False, True])
def test_record_forms_when_the_id_members_also_occur_nested(plain: bool) -> None:
    ids = {"record_digest": "sha256:" + "a" * 64, "record_id": "mem_x"}
    for record in (
        {"a": dict(ids), **ids, "z": 1},
        {**ids, "z": dict(ids)},
        {**ids},
        {"record_id": "mem_x", "z": [{"record_id": "mem_x"}]},
        {"a": 1, "record_digest": "sha256:" + "a" * 64},
    ):
        rest = {key: item for key, item in record.items() if key not in ids}
        assert record_forms(record, plain=plain) == (canonical_bytes(rest), canonical_bytes(record))


@settings(max_examples=300)
@given(
    st.dictionaries(st.sampled_from(["receipt_digest", "a", "z", "é", "receipt", "r"]) | _ascii_keys, _values),
    st.sampled_from(["receipt_digest", "redaction_receipt_digest", "é"]),
)
def test_sealed_receipt_is_the_receipt_digest_and_the_sealed_bytes(body: dict[str, Any], field: str) -> None:
    if _canonical_or_none(body) is None:
        return
    value, sealed = sealed_receipt(Domain.RANK_RECEIPT, body, field)
    assert value == receipt_digest(Domain.RANK_RECEIPT, body, field)
    assert sealed == canonical_bytes({**body, field: value})


def test_sealed_receipt_when_the_placeholder_member_also_occurs_nested() -> None:
    body = {"a": {"receipt_digest": ZERO_DIGEST}, "receipt_digest": ZERO_DIGEST, "z": 1}
    value, sealed = sealed_receipt(Domain.READ_RECEIPT, body)
    assert value == receipt_digest(Domain.READ_RECEIPT, body)
    assert sealed == canonical_bytes({**body, "receipt_digest": value})
    assert sealed_receipt(Domain.READ_RECEIPT, {}) == (
        digest(Domain.READ_RECEIPT, {}),
        canonical_bytes({"receipt_digest": digest(Domain.READ_RECEIPT, {})}),
    )


@given(
    offset=st.integers(0, 10**6),
    valid_as_of=st.integers(0, 2**53 - 1),
    system_as_of=st.integers(0, 2**64 - 1),
    ordering=st.text(max_size=80),
)
def test_encoded_length_is_the_length_of_the_encoded_cursor(
    offset: int, valid_as_of: int, system_as_of: int, ordering: str
) -> None:
    codec = PageCursorCodec(b"s" * 32)
    cursor = PageCursor(offset=offset, valid_as_of=valid_as_of, system_as_of=system_as_of, ordering_digest=ordering)
    try:
        token = codec.encode(cursor, ZERO_DIGEST)
    except CanonicalError:
        return
    assert codec.encoded_length(cursor) == len(token)


def test_an_ordering_digest_is_as_long_as_the_placeholder() -> None:
    from engram_memory.read_path import _ordering_digest  # noqa: PLC0415 - private helper under test

    for hits in ([], [RankedHit(record_id="mem_a", score=1.0, recency=0.5, lexical=1.0)]):
        assert len(_ordering_digest(hits)) == len(ZERO_DIGEST)


# --------------------------------------------------------------------------- page cursor bytes

_CURSOR_SECRET: Final = b"k" * 32
_CURSOR_BINDING: Final = "sha256:" + "ab" * 32
_CURSOR_PINS: Final = PageCursor(
    offset=70, valid_as_of=1_767_225_600_000, system_as_of=42, ordering_digest="sha256:" + "cd" * 32
)
_CURSOR_PAYLOAD: Final = b'{"o":70,"od":"sha256:' + b"cd" * 32 + b'","sa":"42","v":1,"va":1767225600000}'
"""The canonical payload, written by hand: keys sorted, ``sa`` a decimal cursor string, version 1."""
_BASE64URL_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _unpadded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _expected_raw() -> bytes:
    """``payload || HMAC-SHA256(secret, PAGE_CURSOR domain || binding digest || payload)``."""
    message = b"engram-memory/page-cursor/v1\x00" + _CURSOR_BINDING.encode("ascii") + _CURSOR_PAYLOAD
    return _CURSOR_PAYLOAD + hmac.new(_CURSOR_SECRET, message, hashlib.sha256).digest()


def test_a_page_cursor_is_the_documented_mac_over_the_payload() -> None:
    codec = PageCursorCodec(_CURSOR_SECRET)
    token = _unpadded(_expected_raw())
    assert codec.encode(_CURSOR_PINS, _CURSOR_BINDING) == token
    assert codec.decode(token, _CURSOR_BINDING) == _CURSOR_PINS
    assert codec.encoded_length(_CURSOR_PINS) == len(token)


def _assert_stale(codec: PageCursorCodec, token: str, binding: str = _CURSOR_BINDING) -> None:
    with pytest.raises(EngramError) as caught:
        codec.decode(token, binding)
    assert caught.value.code is ErrorCode.STALE_PAGE
    assert caught.value.retriable is False


def test_a_cursor_with_other_unused_bits_is_stale() -> None:
    """Flipping an unused low bit of the last character edits the token but not the bytes it decodes to."""
    raw = _expected_raw()
    assert len(raw) % 3 != 0  # else the last character has no unused bits and this test proves nothing
    token = _unpadded(raw)
    edited = token[:-1] + _BASE64URL_ALPHABET[_BASE64URL_ALPHABET.index(token[-1]) ^ 1]
    assert edited != token
    assert base64.urlsafe_b64decode(edited + "=" * (-len(edited) % 4)) == raw
    _assert_stale(PageCursorCodec(_CURSOR_SECRET), edited)


def _edited_cursors() -> dict[str, str]:
    raw = _expected_raw()
    token = _unpadded(raw)
    assert "-" in token or "_" in token  # so the standard-alphabet spelling differs
    flipped = bytes([raw[0] ^ 1]) + raw[1:]
    return {
        "padded": token + "=" * (-len(token) % 4),
        "standard-alphabet": token.replace("-", "+").replace("_", "/"),
        "truncated": token[:-1],
        "payload-byte": _unpadded(flipped),
        "mac-only": _unpadded(raw[-32:]),
        "payload-only": _unpadded(_CURSOR_PAYLOAD),
        "longer": _unpadded(raw + b"\x00"),
        "empty": "",
    }


@pytest.mark.parametrize("name", list(_edited_cursors()))
def test_an_edited_cursor_is_stale(name: str) -> None:
    edited = _edited_cursors()[name]
    assert edited != _unpadded(_expected_raw())
    _assert_stale(PageCursorCodec(_CURSOR_SECRET), edited)


def test_a_cursor_under_another_secret_or_binding_is_stale() -> None:
    token = _unpadded(_expected_raw())
    _assert_stale(PageCursorCodec(b"j" * 32), token)
    _assert_stale(PageCursorCodec(_CURSOR_SECRET), token, "sha256:" + "ac" * 32)


def _forged(payload: bytes) -> str:
    """A token whose MAC verifies for ``payload``: only a holder of the store secret can make one."""
    message = b"engram-memory/page-cursor/v1\x00" + _CURSOR_BINDING.encode("ascii") + payload
    return _unpadded(payload + hmac.new(_CURSOR_SECRET, message, hashlib.sha256).digest())


_FORGED_PAYLOADS: Final = {
    "spaced": _CURSOR_PAYLOAD.replace(b",", b", "),
    "keys-unsorted": b'{"v":1,"o":70,"od":"sha256:' + b"cd" * 32 + b'","sa":"42","va":1767225600000}',
    "another-version": _CURSOR_PAYLOAD.replace(b'"v":1', b'"v":2'),
    "offset-as-a-string": _CURSOR_PAYLOAD.replace(b'"o":70', b'"o":"70"'),
    "offset-as-a-boolean": _CURSOR_PAYLOAD.replace(b'"o":70', b'"o":true'),
    "valid-as-of-as-a-string": _CURSOR_PAYLOAD.replace(b'"va":1767225600000', b'"va":"1767225600000"'),
    "ordering-digest-as-a-number": _CURSOR_PAYLOAD.replace(b'"od":"sha256:' + b"cd" * 32 + b'"', b'"od":7'),
    "cursor-as-a-number": _CURSOR_PAYLOAD.replace(b'"sa":"42"', b'"sa":42'),
    "cursor-not-decimal": _CURSOR_PAYLOAD.replace(b'"sa":"42"', b'"sa":"x"'),
    "a-pin-missing": _CURSOR_PAYLOAD.replace(b'"sa":"42",', b""),
    "not-json": b"not a cursor payload",
}


@pytest.mark.parametrize("name", list(_FORGED_PAYLOADS))
def test_a_mac_valid_payload_this_codec_did_not_write_is_stale(name: str) -> None:
    """Defence in depth behind the MAC: a payload that is not exactly one this codec writes (a forged one,
    or one of another cursor version) is ``STALE_PAGE``, never decoded into pins nor a crash."""
    payload = _FORGED_PAYLOADS[name]
    assert payload != _CURSOR_PAYLOAD
    codec = PageCursorCodec(_CURSOR_SECRET)
    with pytest.raises(EngramError) as caught:
        codec.decode(_forged(payload), _CURSOR_BINDING)
    assert (caught.value.code, caught.value.retriable) == (ErrorCode.STALE_PAGE, False)
    assert caught.value.__notes__ == ["page cursor payload is malformed"]
    assert codec.decode(_forged(_CURSOR_PAYLOAD), _CURSOR_BINDING) == _CURSOR_PINS  # the helper forges faithfully
