"""The canonical fast path writes exactly what the RFC 8785 path writes, for every value it takes."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.canonical import (
    _PLAIN_ENCODE,
    _PLAIN_ENCODER,
    CanonicalError,
    Domain,
    _is_plain,
    _normalise,
    canonical_bytes,
    canonical_plain,
    digest,
    parse_plain,
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) - 5, max_value=2**53 + 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


def _slow(value: Any) -> bytes | None:
    try:
        return bytes(rfc8785.dumps(_normalise(value)))
    except (ValueError, TypeError):
        return None


@settings(max_examples=600)
@given(_json)
def test_fast_path_output_equals_the_rfc8785_output(value: Any) -> None:
    if _is_plain(value):
        assert canonical_bytes(value) == _slow(value)


def test_fast_path_is_taken_for_typical_payloads_and_not_for_edge_values() -> None:
    assert _is_plain({"text": "décision", "t": 1767225600000, "score": 0.85, "ok": True, "none": None})
    for edge in (1e21, 1e-7, -0.0, 2**53, 2.0**53, "e\u0301", {"é": 1}, "\ud800", ["a", "e\u0301"], {1: "a"}):
        assert not _is_plain(edge), edge
    assert canonical_bytes({"b": [1.5, "x\n\u0001"], "a": "é"}) == b'{"a":"\xc3\xa9","b":[1.5,"x\\n\\u0001"]}'


_integral_floats = st.integers(min_value=-(2**53) - 5, max_value=2**53 + 5).map(float) | st.sampled_from([0.0, -0.0])
_with_integral = st.recursive(
    _scalars | _integral_floats,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=600)
@given(_with_integral)
def test_fast_path_with_integral_floats_and_tuples_equals_the_rfc8785_output(value: Any) -> None:
    if _is_plain(value):
        assert canonical_bytes(value) == _slow(value)


@given(st.lists(st.text(max_size=6), max_size=8))
def test_lists_of_strings_take_the_fast_path_only_when_exact(value: list[str]) -> None:
    if _is_plain(value):
        assert canonical_bytes(value) == _slow(value)
    else:
        assert _slow(value) is None or _slow(value) == canonical_bytes(value)


def test_integral_floats_take_the_fast_path_as_integers() -> None:
    value = {"score": 1.0, "weights": {"a": 3.0, "b": 0.5}, "n": [0.0, 2.0**53 - 1]}
    assert _is_plain(value)
    assert canonical_bytes(value) == b'{"n":[0,9007199254740991],"score":1,"weights":{"a":3,"b":0.5}}'
    assert canonical_bytes(value) == _slow(value)


def _same_json(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (``1 == 1.0`` is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_json(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # noqa: PLR0124 - NaN


_texts = st.sampled_from(
    [
        '{"a":1.0}',
        '{"a":-0}',
        '{"a":-0.0}',
        "[1e400]",
        "[NaN]",
        '["\\u00e9"]',
        '"\\ud800"',
        "[9007199254740992]",
        " [1] ",
        "\x00[]",
        "[1,]",
    ]
)


@settings(max_examples=400)
@given(_json | _with_integral, st.sampled_from(["canonical", "ascii", "spaced"]))
def test_parse_plain_parses_as_json_loads_and_knows_when_the_fast_path_is_exact(value: Any, form: str) -> None:
    try:
        if form == "canonical":
            data = canonical_bytes(value)
        else:
            data = json.dumps(value, ensure_ascii=form == "ascii", indent=1 if form == "spaced" else None).encode()
    except (ValueError, UnicodeEncodeError):
        return
    _check_parse_plain(data)


@given(_texts | st.text(max_size=12))
def test_parse_plain_fails_and_succeeds_as_json_loads(text: str) -> None:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return
    _check_parse_plain(data)


def _check_parse_plain(data: bytes) -> None:
    try:
        expected = json.loads(data)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            parse_plain(data)
        return
    parsed, plain = parse_plain(data)
    assert _same_json(parsed, expected)
    if plain:
        assert _is_plain(parsed)
        assert canonical_plain(parsed) == canonical_bytes(parsed) == _slow(parsed)


@settings(max_examples=300)
@given(_json | _with_integral)
def test_the_one_shot_encoder_writes_what_the_plain_encoder_writes(value: Any) -> None:
    try:
        expected = _PLAIN_ENCODER.encode(value)
    except ValueError:
        return
    assert _PLAIN_ENCODE(value) == expected


_LONG_PREFIX: Final = ["a"] * 16
"""Sixteen ASCII strings: one more string makes a list long enough for the bulk string check."""


def test_a_long_list_of_strings_is_normalised_to_nfc() -> None:
    """More than 16 strings take the bulk check; a non-ASCII item must still be NFC-normalised."""
    expected = b"[" + b'"a",' * 16 + b'"\xc3\xa9"]'  # U+00E9 in UTF-8, typed by hand
    for last in ("e\u0301", "\u00e9"):
        assert canonical_bytes([*_LONG_PREFIX, last]) == expected
        assert canonical_bytes((*_LONG_PREFIX, last)) == expected
    expected_digest = "sha256:" + hashlib.sha256(b"graphify-memory/payload/v2\x00" + expected).hexdigest()
    assert digest(Domain.PAYLOAD, [*_LONG_PREFIX, "e\u0301"]) == expected_digest


def test_a_long_list_of_strings_refuses_a_lone_surrogate() -> None:
    with pytest.raises(CanonicalError):
        canonical_bytes([*_LONG_PREFIX, "\ud800"])


def test_a_long_list_of_ascii_strings_is_written_as_is() -> None:
    assert canonical_bytes([*_LONG_PREFIX, "b"]) == b"[" + b'"a",' * 16 + b'"b"]'
