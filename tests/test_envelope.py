"""The result envelope and its MCP ``CallToolResult`` carriage."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_memory.errors import PUBLIC_MESSAGES, RETRIABLE, EngramError, ErrorCode
from engram_memory.wire.envelope import (
    OUTPUT_SCHEMA_VERSION,
    REDACTION_CLASS,
    failure_envelope,
    success_envelope,
    to_envelope,
    to_mcp_call_result,
)

AUDIT_ID = "audit-7f3a"

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
JSON_OBJECTS: st.SearchStrategy[dict[str, Any]] = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5)

NESTED_NON_ASCII: dict[str, Any] = {
    "records": [
        {
            "record": {"record_id": "mem_" + "a" * 52, "text": "Caf\u00e9 \u6c7a\u5b9a \U0001f600 \u2028"},
            "redacted_fields": ["/citations"],
            "score": 0.85,
            "rank": 1,
        }
    ],
    "\u30ad\u30fc": {"nested": [[], {}, [None, True, False, -1, 1.5e-7]]},
    'quotes"and\\slashes': "\u0000\u001f\t",
}


def _strict_equal(left: Any, right: Any) -> bool:
    """Structural equality that also compares JSON types (1 is not 1.0, True is not 1)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_strict_equal(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_strict_equal, left, right))
    if isinstance(left, float):
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    return bool(left == right)


def _check_carriage(envelope: dict[str, Any]) -> dict[str, Any]:
    result = to_mcp_call_result(envelope)
    assert set(result) == {"structuredContent", "content", "isError"}
    assert result["structuredContent"] == envelope
    content = result["content"]
    assert isinstance(content, list)
    assert len(content) == 1
    item = content[0]
    assert set(item) == {"type", "text"}
    assert item["type"] == "text"
    assert isinstance(item["text"], str)
    assert _strict_equal(json.loads(item["text"]), result["structuredContent"])
    assert result["isError"] is (not envelope["ok"])
    return result


# --------------------------------------------------------------------------- envelope shapes


def test_constants() -> None:
    assert OUTPUT_SCHEMA_VERSION == 1
    assert REDACTION_CLASS == "high"


def test_success_envelope_shape() -> None:
    value = {"status": "committed_pending", "cursor": "1"}
    envelope = success_envelope(value, AUDIT_ID)
    assert envelope == {
        "ok": True,
        "output": {"schema_version": 1, "value": value},
        "auditId": AUDIT_ID,
        "redactionClass": "high",
    }
    assert set(envelope) == {"ok", "output", "auditId", "redactionClass"}
    assert envelope["ok"] is True
    assert type(envelope["output"]["schema_version"]) is int
    assert set(envelope["output"]) == {"schema_version", "value"}
    assert "error" not in envelope


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_failure_envelope_shape(code: ErrorCode) -> None:
    envelope = failure_envelope(EngramError(code), AUDIT_ID)
    assert envelope == {
        "ok": False,
        "auditId": AUDIT_ID,
        "redactionClass": "high",
        "error": {"code": code.value, "message": PUBLIC_MESSAGES[code], "retriable": RETRIABLE[code]},
    }
    assert envelope["ok"] is False
    assert type(envelope["error"]["code"]) is str
    assert type(envelope["error"]["retriable"]) is bool
    assert "output" not in envelope


def test_failure_envelope_spells_gate_failed_in_lower_case() -> None:
    envelope = failure_envelope(EngramError(ErrorCode.GATE_FAILED), AUDIT_ID)
    assert envelope["error"]["code"] == "gate_failed"
    assert envelope["error"]["retriable"] is False
    assert json.loads(to_mcp_call_result(envelope)["content"][0]["text"])["error"]["code"] == "gate_failed"


def test_to_envelope_dispatches_on_the_result() -> None:
    value = {"record": {"record_id": "mem_" + "b" * 52}}
    assert to_envelope(value, AUDIT_ID) == success_envelope(value, AUDIT_ID)
    err = EngramError(ErrorCode.STALE_PAGE)
    assert to_envelope(err, AUDIT_ID) == failure_envelope(err, AUDIT_ID)


def test_empty_success_value_is_still_an_envelope() -> None:
    envelope = success_envelope({}, AUDIT_ID)
    assert envelope["output"] == {"schema_version": 1, "value": {}}
    _check_carriage(envelope)


# --------------------------------------------------------------------------- MCP carriage


def test_mcp_carriage_of_a_success_with_non_ascii_and_nesting() -> None:
    envelope = success_envelope(NESTED_NON_ASCII, AUDIT_ID)
    result = _check_carriage(envelope)
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"])["output"]["value"]["\u30ad\u30fc"] == {
        "nested": [[], {}, [None, True, False, -1, 1.5e-7]]
    }


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_mcp_carriage_of_a_failure(code: ErrorCode) -> None:
    result = _check_carriage(failure_envelope(EngramError(code), AUDIT_ID))
    assert result["isError"] is True


def test_mcp_carriage_of_non_ascii_audit_id() -> None:
    _check_carriage(success_envelope({"k": "v"}, "audit-\u00e9-\U0001f600"))
    _check_carriage(failure_envelope(EngramError(ErrorCode.NOT_FOUND), "audit-\u00e9-\U0001f600"))


def test_mcp_carriage_refuses_non_finite_numbers() -> None:
    # NaN has no JSON text; the copy must never be invalid JSON
    with pytest.raises(ValueError, match="JSON"):
        to_mcp_call_result(success_envelope({"score": math.nan}, AUDIT_ID))


@given(JSON_OBJECTS, st.text(min_size=1, max_size=16))
def test_mcp_text_copy_equals_structured_content(value: dict[str, Any], audit_id: str) -> None:
    envelope = success_envelope(value, audit_id)
    result = _check_carriage(envelope)
    assert _strict_equal(json.loads(result["content"][0]["text"])["output"]["value"], value)


@given(st.sampled_from(list(ErrorCode)), st.text(min_size=1, max_size=16))
def test_mcp_text_copy_of_failures(code: ErrorCode, audit_id: str) -> None:
    _check_carriage(failure_envelope(EngramError(code), audit_id))


# --------------------------------------------------------------------------- no detail leaks


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_error_details_never_reach_the_envelope(code: ErrorCode) -> None:
    pointer = "/payload/citations/3/source_ref"
    detail = "canary-detail-91d2 token=hunter2"
    err = EngramError(code, pointer=pointer, detail=detail)
    envelope = failure_envelope(err, AUDIT_ID)
    result = to_mcp_call_result(envelope)
    for text in (
        json.dumps(envelope, ensure_ascii=False),
        result["content"][0]["text"],
        json.dumps(result["structuredContent"], ensure_ascii=False),
    ):
        assert "canary-detail-91d2" not in text
        assert "hunter2" not in text
        assert "citations/3" not in text
        assert "source_ref" not in text
        for note in err.__notes__:
            assert note not in text
    assert set(envelope["error"]) == {"code", "message", "retriable"}
    assert envelope["error"]["message"] == PUBLIC_MESSAGES[code]


@given(st.text(min_size=1, max_size=40), st.text(min_size=8, max_size=40))
def test_arbitrary_details_never_reach_the_envelope(pointer_tail: str, detail: str) -> None:
    err = EngramError(ErrorCode.INVALID_SCHEMA, pointer="/" + pointer_tail, detail=detail)
    envelope = to_envelope(err, AUDIT_ID)
    assert envelope["error"] == {
        "code": "INVALID_SCHEMA",
        "message": PUBLIC_MESSAGES[ErrorCode.INVALID_SCHEMA],
        "retriable": False,
    }
    assert set(envelope) == {"ok", "auditId", "redactionClass", "error"}


# --------------------------------------------------------------------------- the text copy is compact UTF-8 JSON


def test_mcp_text_of_a_success_is_compact_and_not_ascii_escaped() -> None:
    """contract.md: the text is the compact JSON of the envelope (UTF-8, not ASCII-escaped)."""
    envelope = success_envelope({"k": "caf\u00e9 \U0001f600", "n": [1, 2]}, "a-\u00e9")
    text = to_mcp_call_result(envelope)["content"][0]["text"]
    assert text == (
        '{"ok":true,"output":{"schema_version":1,"value":{"k":"caf\u00e9 \U0001f600","n":[1,2]}},'
        '"auditId":"a-\u00e9","redactionClass":"high"}'
    )
    assert "\\u" not in text


def test_mcp_text_of_a_failure_is_compact() -> None:
    text = to_mcp_call_result(failure_envelope(EngramError(ErrorCode.NOT_FOUND), "a-1"))["content"][0]["text"]
    message = PUBLIC_MESSAGES[ErrorCode.NOT_FOUND]
    assert text == (
        '{"ok":false,"auditId":"a-1","redactionClass":"high",'
        f'"error":{{"code":"NOT_FOUND","message":"{message}","retriable":false}}}}'
    )


@given(JSON_OBJECTS, st.text(min_size=1, max_size=16))
def test_mcp_text_is_its_own_compact_unescaped_form(value: dict[str, Any], audit_id: str) -> None:
    """Re-serialising the parsed text compactly, without ASCII escapes, gives the same text back."""
    text = to_mcp_call_result(success_envelope(value, audit_id))["content"][0]["text"]
    assert json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":")) == text
