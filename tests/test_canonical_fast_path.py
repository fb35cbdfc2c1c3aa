"""The canonical fast path writes exactly what the RFC 8785 path writes, for every value it takes."""

from __future__ import annotations

from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.canonical import _is_plain, _normalise, canonical_bytes

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
