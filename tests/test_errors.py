"""Error codes, the retriable table and the exception families against the founding contract."""

from __future__ import annotations

import re
import string
import traceback
from pathlib import Path

import pytest

from engram_memory.errors import (
    PUBLIC_MESSAGES,
    RETRIABLE,
    EngramError,
    ErrorCode,
    JsonRpcCode,
    KeyUnavailableError,
    PortError,
    ProtocolError,
    SealIntegrityError,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)

CONTRACT_DOC = Path(__file__).resolve().parent.parent / "docs" / "contract.md"

# Written out from the founding contract's table "Error codes and what the caller does".
CONTRACT_CODES: frozenset[str] = frozenset(
    {
        # row: fix the arguments against the closed schema
        "INVALID_SCHEMA",
        "INVALID_DIGEST",
        # rows: not permitted, not found, conflicting key
        "UNAUTHORIZED",
        "AUTHORIZATION_EXPIRED",
        "AUTHORIZATION_REVOKED",
        "NOT_FOUND",
        "DIGEST_CONFLICT",
        # rows: lifecycle, unknown outcome, gate, paging, size
        "ILLEGAL_TRANSITION",
        "ALREADY_TERMINAL",
        "MUTATION_OUTCOME_UNKNOWN",
        "gate_failed",
        "STALE_PAGE",
        "RESULT_TOO_LARGE",
        "PROJECTION_OVERSIZED",
        # retriable: back off and retry
        "RATE_LIMITED",
        "DEADLINE_EXCEEDED",
        "CANCELLED",
        "STORE_UNAVAILABLE",
        "FENCE_LOST",
        "CURSOR_GAP",
        "POLICY_UNAVAILABLE",
        "POLICY_STALE",
        "PROJECTION_STALE",
        "RANKING_UNAVAILABLE",
        # operational failure: stop and report to the host operator
        "CAPABILITY_UNAVAILABLE",
        "JOURNAL_CORRUPT",
        "BLOB_MISSING",
        "REGISTRY_VERSION_UNAVAILABLE",
        "BACKUP_INVALID",
        "RESTORE_REFUSED",
        "MIGRATION_LEDGER_INVALID",
    }
)

# The ten codes of the "retriable: back off and retry" row, plus MUTATION_OUTCOME_UNKNOWN ("retry
# with the same key and arguments until a clear outcome").
CONTRACT_RETRIABLE: frozenset[str] = frozenset(
    {
        "RATE_LIMITED",
        "DEADLINE_EXCEEDED",
        "CANCELLED",
        "STORE_UNAVAILABLE",
        "FENCE_LOST",
        "CURSOR_GAP",
        "POLICY_UNAVAILABLE",
        "POLICY_STALE",
        "PROJECTION_STALE",
        "RANKING_UNAVAILABLE",
        "MUTATION_OUTCOME_UNKNOWN",
    }
)

ALL_CODES = list(ErrorCode)


def test_error_codes_are_exactly_the_contract_table() -> None:
    assert {code.value for code in ErrorCode} == CONTRACT_CODES
    assert len(ErrorCode.__members__) == len(CONTRACT_CODES), "no aliases"
    assert len(CONTRACT_CODES) == 31


def test_gate_failed_is_lower_case_on_the_wire() -> None:
    assert ErrorCode.GATE_FAILED.value == "gate_failed"
    assert ErrorCode("gate_failed") is ErrorCode.GATE_FAILED
    with pytest.raises(ValueError, match="GATE_FAILED"):
        ErrorCode("GATE_FAILED")


@pytest.mark.parametrize("code", ALL_CODES, ids=str)
def test_codes_are_strings_spelled_as_on_the_wire(code: ErrorCode) -> None:
    assert isinstance(code, str)
    assert str(code) == code.value
    assert f"{code}" == code.value


def test_retriable_table_covers_every_code() -> None:
    assert set(RETRIABLE) == set(ErrorCode)
    assert all(type(flag) is bool for flag in RETRIABLE.values())


@pytest.mark.parametrize("code", ALL_CODES, ids=str)
def test_retriable_flag_matches_the_contract(code: ErrorCode) -> None:
    assert RETRIABLE[code] is (code.value in CONTRACT_RETRIABLE)


def test_retriable_set_has_eleven_codes() -> None:
    assert {code.value for code, flag in RETRIABLE.items() if flag} == CONTRACT_RETRIABLE
    assert len(CONTRACT_RETRIABLE) == 11


def test_public_messages_cover_every_code() -> None:
    assert set(PUBLIC_MESSAGES) == set(ErrorCode)


@pytest.mark.parametrize("code", ALL_CODES, ids=str)
def test_public_message_is_a_constant_sentence(code: ErrorCode) -> None:
    message = PUBLIC_MESSAGES[code]
    assert isinstance(message, str)
    assert message
    assert message == message.strip()
    assert "\n" not in message
    assert message.isprintable()
    assert "{" not in message
    assert "}" not in message
    assert not re.search(r"%[-#0 +]*[0-9]*(\.[0-9]+)?[sdrifxXeEgGcoa%(]", message)
    assert not [field for _, field, _, _ in string.Formatter().parse(message) if field is not None]


@pytest.mark.parametrize("code", ALL_CODES, ids=str)
def test_engram_error_takes_message_and_retriable_from_the_tables(code: ErrorCode) -> None:
    err = EngramError(code)
    assert err.code is code
    assert str(err) == PUBLIC_MESSAGES[code]
    assert err.public_message == PUBLIC_MESSAGES[code]
    assert err.args == (PUBLIC_MESSAGES[code],)
    assert err.retriable is RETRIABLE[code]
    assert err.pointer is None
    assert getattr(err, "__notes__", []) == []


def test_engram_error_notes_carry_pointer_and_detail() -> None:
    err = EngramError(
        ErrorCode.INVALID_SCHEMA,
        pointer="/payload/components/0/text",
        detail="text exceeds 65536 UTF-8 bytes: 'secret-canary'",
    )
    assert str(err) == PUBLIC_MESSAGES[ErrorCode.INVALID_SCHEMA]
    assert err.pointer == "/payload/components/0/text"
    notes = err.__notes__
    assert any("/payload/components/0/text" in note for note in notes)
    assert any("secret-canary" in note for note in notes)
    assert "/payload" not in str(err)
    assert "secret-canary" not in str(err)
    rendered = "".join(traceback.format_exception(err))
    assert "/payload/components/0/text" in rendered
    assert "secret-canary" in rendered


def test_engram_error_root_pointer() -> None:
    err = EngramError(ErrorCode.INVALID_SCHEMA, pointer="")
    assert err.pointer == ""
    assert err.__notes__ == ["at /"]
    assert str(err) == PUBLIC_MESSAGES[ErrorCode.INVALID_SCHEMA]


def test_engram_error_can_be_raised_and_caught() -> None:
    with pytest.raises(EngramError) as info:
        raise EngramError(ErrorCode.NOT_FOUND, detail="record mem_x in scope y")
    assert info.value.code is ErrorCode.NOT_FOUND
    assert str(info.value) == "memory target not found"
    assert "mem_x" not in str(info.value)


def test_protocol_error_is_not_a_memory_answer() -> None:
    assert not issubclass(ProtocolError, EngramError)
    assert not issubclass(EngramError, ProtocolError)
    assert not isinstance(ProtocolError.unknown_tool(), EngramError)


def test_json_rpc_codes() -> None:
    assert {code.value for code in JsonRpcCode} == {-32602, -32603}
    assert int(JsonRpcCode.INVALID_PARAMS) == -32602
    assert int(JsonRpcCode.INTERNAL_ERROR) == -32603


def test_protocol_error_constructors() -> None:
    unknown = ProtocolError.unknown_tool("engram_memory_admin")
    assert unknown.code == -32602
    assert unknown.code is JsonRpcCode.INVALID_PARAMS
    untrusted = ProtocolError.untrusted_context("purpose mismatch")
    assert untrusted.code == -32603
    assert untrusted.code is JsonRpcCode.INTERNAL_ERROR
    for err, detail in ((unknown, "engram_memory_admin"), (untrusted, "purpose mismatch")):
        assert str(err) == err.message == ProtocolError.MESSAGES[err.code]
        assert detail not in str(err)
        assert err.__notes__ == [detail]
    assert getattr(ProtocolError.unknown_tool(), "__notes__", []) == []


def test_port_errors_are_neither_memory_nor_protocol_errors() -> None:
    for cls in (
        StoreUnavailableError,
        StoreOutcomeUnknownError,
        StoreConflictError,
        StoreCorruptError,
        KeyUnavailableError,
        SealIntegrityError,
    ):
        assert issubclass(cls, PortError)
        assert not issubclass(cls, EngramError)
        assert not issubclass(cls, ProtocolError)


def test_store_corrupt_error_keeps_detail_out_of_its_message() -> None:
    err = StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "event 17 hash mismatch")
    assert err.code is ErrorCode.JOURNAL_CORRUPT
    assert str(err) == PUBLIC_MESSAGES[ErrorCode.JOURNAL_CORRUPT]
    assert err.__notes__ == ["event 17 hash mismatch"]


def _documented_table() -> list[tuple[str, str, str]]:
    """(code, retriable yes/no, message) of each row of docs/contract.md's error table."""
    text = CONTRACT_DOC.read_text(encoding="utf-8")
    match = re.search(r"^## Error codes\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match is not None, "docs/contract.md has no '## Error codes' section"
    return re.findall(r"^\| `([A-Za-z_]+)` \| (yes|no) \| ([^|`]+?) \|", match.group(1), re.MULTILINE)


def test_documented_error_table_matches_retriable() -> None:
    rows = _documented_table()
    documented = {code: flag == "yes" for code, flag, _ in rows}
    assert len(documented) == len(rows), "a code is documented twice"
    assert documented == {code.value: flag for code, flag in RETRIABLE.items()}
    assert set(documented) == CONTRACT_CODES


def test_documented_error_table_gives_each_wire_message() -> None:
    """The ``error.message`` of every code is the sentence docs/contract.md publishes for it, verbatim."""
    documented = {code: message for code, _, message in _documented_table()}
    assert set(documented) == CONTRACT_CODES
    assert documented == {code.value: message for code, message in PUBLIC_MESSAGES.items()}
    assert documented["NOT_FOUND"] == "memory target not found"
    assert documented["gate_failed"] == "a confirmation or policy gate was not met"
