"""Redaction by omission (contract.md, Redaction): RFC 6901 pointers, escaping, malformed pointers, merges.

Every expectation is written by hand from RFC 6901 and the contract's rules; ``redact_record`` is
never its own oracle.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import pytest

from engram_memory.redaction import redact_record

RECORD_ID: Final = "mem_" + "a" * 52


def _record(**fields: Any) -> dict[str, Any]:
    return {"record_id": RECORD_ID, **fields}


def test_tokens_unescape_tilde_one_before_tilde_zero() -> None:
    """RFC 6901 §4: ``~01`` is the key ``~1`` (not ``/``), ``~1`` is ``/`` and ``~0`` is ``~``."""
    record = _record(**{"~1": 1, "/": 2, "~": 3, "a/b": 4})
    redacted, removed = redact_record(record, ("/~01",))
    assert redacted == {"record_id": RECORD_ID, "~1": 1}
    assert removed == ["/a~1b", "/~0", "/~1"]
    redacted, removed = redact_record(record, ("/~1", "/~0"))
    assert redacted == {"record_id": RECORD_ID, "/": 2, "~": 3}
    assert removed == ["/a~1b", "/~01"]


def test_removed_fields_are_escaped_tilde_first() -> None:
    record = _record(**{"a/b": 1, "c~d": 2, "~1": 3, "x/~": 4, "plain": 5})
    redacted, removed = redact_record(record, ())
    assert redacted == {"record_id": RECORD_ID}
    assert removed == ["/a~1b", "/c~0d", "/plain", "/x~1~0", "/~01"]


@pytest.mark.parametrize(
    "pointer",
    ["/x~2", "/x~", "x~2", "bad", "ad", "record_id", "/x~2/y"],
)
def test_malformed_pointers_select_nothing(pointer: str) -> None:
    """A pointer that is not RFC 6901 (no leading ``/``, or ``~`` not followed by 0 or 1) is ignored."""
    record = _record(**{"x~2": 1, "x~": 2, "ad": 3, "bad": 4, "ecord_id": 5})
    redacted, removed = redact_record(record, (pointer,))
    assert redacted == {"record_id": RECORD_ID}
    assert removed == ["/ad", "/bad", "/ecord_id", "/x~0", "/x~02"]


def test_nested_pointers_into_one_object_are_merged() -> None:
    trust = {"class": "asserted", "issued_at": "2026-01-01T00:00:00.000Z", "verifier_id": "host"}
    record = _record(trust=trust, scope_ref="s")
    before = copy.deepcopy(record)
    for allowlist in (("/trust/class", "/trust/issued_at"), ("/trust/issued_at", "/trust/class")):
        redacted, removed = redact_record(record, allowlist)
        assert redacted == {
            "record_id": RECORD_ID,
            "trust": {"class": "asserted", "issued_at": "2026-01-01T00:00:00.000Z"},
        }
        assert removed == ["/scope_ref"]
    assert record == before


def test_deeper_pointers_merge_under_a_new_parent() -> None:
    record = _record(a={"b": {"c": 1, "d": 2, "e": 3}, "f": 4})
    before = copy.deepcopy(record)
    redacted, removed = redact_record(record, ("/a/b/c", "/a/b/d", "/a/f"))
    assert redacted == {"record_id": RECORD_ID, "a": {"b": {"c": 1, "d": 2}, "f": 4}}
    assert removed == []
    assert record == before
