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
    for edge in (1.0, 1e21, 1e-7, -0.0, 2**53, "e\u0301", {"é": 1}, "\ud800"):
        assert not _is_plain(edge), edge
    assert canonical_bytes({"b": [1.5, "x\n\u0001"], "a": "é"}) == b'{"a":"\xc3\xa9","b":[1.5,"x\\n\\u0001"]}'
