"""Host-side values are refused where the host builds them, and again where a call would use them.

* A :class:`Confirmation` refuses, when built, fields the stores could not keep alike: a non-``str``
  (``TypeError``), a lone surrogate, and an id that is empty, over 512 UTF-8 bytes or not NFC
  (``ValueError``). One set past the validators is ``-32603`` on both backends, never a retriable
  store error.
* ``HostBinding.confirmation`` is a :class:`Confirmation` or ``None`` (``TypeError``); anything else
  that reaches a call is ``-32603``, never ``MUTATION_OUTCOME_UNKNOWN``.
* ``call_tool`` logs each failure envelope at DEBUG (tool, code, pointer, auditId), never an
  argument's text.
* ``connect()`` names the file it could not open in an exception note.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory import (
    Confirmation,
    DefaultPolicy,
    ErrorCode,
    HostBinding,
    JsonRpcCode,
    ManualClock,
    MemoryService,
    ProtocolError,
    connect,
)
from engram_memory.errors import StoreUnavailableError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import MasterKeyError
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import (
    CAPTURE,
    FORGET,
    SEARCH,
    WITHDRAW,
    Harness,
    capture_args,
    confirm,
    distinctive_words,
    fail,
    make_binding,
    make_key,
    ok,
)
from engram_memory.wire import WithdrawArgs, parse_args

A = make_binding()
AT = datetime(2026, 1, 1, tzinfo=UTC)
TEXT_FIELDS = ("id", "tool", "target", "operation_digest")
KEY = bytes(range(32))


def _confirmation(**overrides: Any) -> Confirmation:
    fields: dict[str, Any] = {
        "id": "approval-1",
        "tool": FORGET,
        "target": "mem_a",
        "operation_digest": "sha256:" + "0" * 64,
        "requested_at": AT,
        "approved_at": AT,
    }
    fields.update(overrides)
    return Confirmation(**fields)


@pytest.fixture(params=["memory", "sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A service accepting every admission, over each reference backend."""
    clock = ManualClock()
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'host.db'}"
    service = connect(url, policy=DefaultPolicy(admission="accept"), clock=clock, master_key=None)
    try:
        yield Harness(service, clock)
    finally:
        service.close()


# --------------------------------------------------------------------------- Confirmation fields


@pytest.mark.parametrize("field", TEXT_FIELDS)
@pytest.mark.parametrize("value", [12345, None, b"approval-1", True], ids=["int", "none", "bytes", "bool"])
def test_a_confirmation_field_that_is_not_a_str_is_a_type_error(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"^{field} must be a str$"):
        _confirmation(**{field: value})


@pytest.mark.parametrize("field", TEXT_FIELDS)
def test_a_confirmation_field_with_a_lone_surrogate_is_a_value_error(field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field} must be valid Unicode text \(no lone surrogate\)$"):
        _confirmation(**{field: "approval-\ud800"})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("", "id must not be empty", id="empty"),
        pytest.param("a" * 513, "id must be at most 512 UTF-8 bytes", id="513-ascii"),
        pytest.param("\u00e9" * 257, "id must be at most 512 UTF-8 bytes", id="514-bytes-257-chars"),
        pytest.param("a" * 100_000, "id must be at most 512 UTF-8 bytes", id="100-kB"),
        pytest.param("approval-e\u0301", "id must be in Unicode NFC", id="nfd"),
        pytest.param("approval-\u212b", "id must be in Unicode NFC", id="angstrom-sign"),
    ],
)
def test_a_confirmation_id_must_be_non_empty_bounded_and_nfc(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        _confirmation(id=value)


@pytest.mark.parametrize(
    "value",
    ["a", "a" * 512, "\u00e9" * 256, "\U0001f600" * 128, "approval-\u00e9", "12345"],
    ids=["one", "512-ascii", "512-bytes-256-chars", "512-bytes-emoji", "nfc", "digits"],
)
def test_confirmation_ids_within_the_bounds_are_kept_exactly(value: str) -> None:
    assert _confirmation(id=value).id == value


def test_other_fields_may_be_any_text() -> None:
    """Only the id is consumed by value; a tool, target or digest the call does not match is ``gate_failed``."""
    odd = _confirmation(tool="", target="e\u0301", operation_digest="not a digest")
    assert (odd.tool, odd.target, odd.operation_digest) == ("", "e\u0301", "not a digest")


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        pytest.param({"id": 12345}, TypeError, id="int-id"),
        pytest.param({"id": ""}, ValueError, id="empty-id"),
        pytest.param({"target": None}, TypeError, id="none-target"),
        pytest.param({"operation_digest": "sha256:\udc80"}, ValueError, id="surrogate-digest"),
        pytest.param({"approved_at": AT.replace(tzinfo=None)}, ValueError, id="naive-approval"),
        pytest.param({"requested_at": "2026-01-01T00:00:00.000Z"}, TypeError, id="text-instant"),
    ],
)
def test_evolve_runs_the_confirmation_validators(changes: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        attrs.evolve(_confirmation(), **changes)


@pytest.mark.parametrize(
    ("confirmation_id", "error"),
    [(12345, TypeError), (None, TypeError), ("", ValueError), ("approval-\ud800", ValueError), ("x" * 600, ValueError)],
    ids=["int", "none", "empty", "surrogate", "600-bytes"],
)
def test_the_confirmation_helper_refuses_a_bad_id(confirmation_id: Any, error: type[Exception]) -> None:
    service = connect("memory:", clock=ManualClock())
    arguments = {"candidate_id": "candidate_x", "idempotency_key": make_key("helper"), "reason_ref": "reason:x"}
    with pytest.raises(error):
        service.confirmation(WITHDRAW, arguments, A, confirmation_id=confirmation_id, requested_at=AT, approved_at=AT)


def _forced(confirmation: Confirmation, **fields: object) -> Confirmation:
    """``confirmation`` with ``fields`` set past its validators, as a careless host could."""
    for name, value in fields.items():
        object.__setattr__(confirmation, name, value)
    return confirmation


@pytest.mark.parametrize(
    "bad_id",
    [12345, None, "approval-\ud800", "", "x" * 600, "approval-e\u0301"],
    ids=["int", "none", "surrogate", "empty", "600-bytes", "nfd"],
)
def test_a_confirmation_id_set_past_the_validators_is_32603_on_both_backends(harness: Harness, bad_id: object) -> None:
    """SQLite used to consume ``12345`` as ``"12345"`` and answer retriable store errors for the others."""
    candidate_id = harness.pending(A, make_key("forced-setup"))
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("forced"), "reason_ref": "reason:forced"}
    bound = confirm(harness.service, WITHDRAW, arguments, A, harness.clock, confirmation_id="placeholder")
    assert bound.confirmation is not None
    forced = attrs.evolve(bound, confirmation=_forced(bound.confirmation, id=bad_id))
    state = harness.state(A)

    with pytest.raises(ProtocolError) as refused:
        harness.call(WITHDRAW, arguments, forced)
    assert refused.value.code is JsonRpcCode.INTERNAL_ERROR
    assert harness.state(A) == state

    # nothing was consumed: a genuine approval, even one spelled like the forced id, still works
    genuine = confirm(harness.service, WITHDRAW, arguments, A, harness.clock, confirmation_id="12345")
    assert ok(harness.call(WITHDRAW, arguments, genuine))["receipt"]["to_state"] == "withdrawn"


# --------------------------------------------------------------------------- HostBinding.confirmation


NOT_CONFIRMATIONS = [{"id": "appr-1", "approved": True}, "appr-1", True, 0]
NOT_CONFIRMATION_IDS = ["dict", "str", "true", "zero"]


@pytest.mark.parametrize("value", NOT_CONFIRMATIONS, ids=NOT_CONFIRMATION_IDS)
def test_a_binding_confirmation_of_another_type_is_a_type_error(value: object) -> None:
    fields = {name: getattr(A, name) for name in ("tenant_id", "workspace_id", "principal", "agent_id", "session")}
    with pytest.raises(TypeError, match="confirmation"):
        HostBinding(**fields, purpose_ref=A.purpose_ref, tools=A.tools, confirmation=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="confirmation"):
        attrs.evolve(A, confirmation=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="confirmation"):
        make_binding(confirmation=value)  # type: ignore[arg-type]


def _forced_binding(value: object) -> HostBinding:
    binding = attrs.evolve(A)
    object.__setattr__(binding, "confirmation", value)
    return binding


def _raises_32603(call: Callable[[], object]) -> None:
    with pytest.raises(ProtocolError) as refused:
        call()
    assert refused.value.code is JsonRpcCode.INTERNAL_ERROR


@pytest.mark.parametrize(
    "value",
    [*NOT_CONFIRMATIONS, _forced(_confirmation(), tool=None), _forced(_confirmation(), approved_at="now")],
    ids=[*NOT_CONFIRMATION_IDS, "forced-tool", "forced-instant"],
)
def test_a_binding_confirmation_set_past_the_validator_is_32603_for_every_call(harness: Harness, value: object) -> None:
    """It used to reach the gate and answer ``MUTATION_OUTCOME_UNKNOWN`` (retriable) for ever."""
    candidate_id = harness.pending(A, make_key("binding-setup"))
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("binding"), "reason_ref": "reason:binding"}
    binding = _forced_binding(value)
    service = harness.service
    state = harness.state(A)

    _raises_32603(lambda: service.call_tool(WITHDRAW, arguments, binding))
    _raises_32603(lambda: service.withdraw(binding, parse_args(WithdrawArgs, arguments)))
    _raises_32603(lambda: service.call_tool(SEARCH, {"query": "convention", "purpose_ref": A.purpose_ref}, binding))
    _raises_32603(lambda: service.call_tool(CAPTURE, capture_args(make_key("binding-capture")), binding))
    _raises_32603(lambda: service.operation_digest(WITHDRAW, arguments, binding))
    _raises_32603(lambda: service.list_tools(binding))
    _raises_32603(lambda: service.granted_tools(binding))
    assert harness.state(A) == state


# --------------------------------------------------------------------------- call_tool's DEBUG record


def _every_text(records: list[logging.LogRecord]) -> str:
    """Everything a handler could write for these records."""
    parts: list[str] = []
    for record in records:
        parts += [record.getMessage(), repr(record.args), record.exc_text or "", record.stack_info or ""]
        if record.exc_info and record.exc_info[1] is not None:
            parts += [repr(record.exc_info[1]), *getattr(record.exc_info[1], "__notes__", [])]
    return "\n".join(parts)


def _debug_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "engram_memory" and record.levelno == logging.DEBUG]


def test_call_tool_logs_code_pointer_and_audit_id_but_no_argument_value(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="engram_memory")
    service = connect("memory:", clock=ManualClock())
    (secret,) = distinctive_words("malformed-instant", 1)
    arguments = capture_args(make_key("diagnostic"))
    arguments["payload"]["citations"][0]["observed_at"] = f"2025-12-30T10:00:00Z-{secret}"
    binding = attrs.evolve(A, audit_id="audit-host-0001")

    envelope = service.call_tool(CAPTURE, arguments, binding)

    fail(envelope, ErrorCode.INVALID_SCHEMA, retriable=False)
    assert [record.getMessage() for record in _debug_records(caplog)] == [
        "engram_memory_capture answered INVALID_SCHEMA at /payload/citations/0/observed_at (auditId audit-host-0001)"
    ]
    assert secret not in _every_text(caplog.records)


def test_an_extra_key_is_logged_as_a_star_and_its_name_nowhere(caplog: pytest.LogCaptureFixture) -> None:
    """The notes quote an extra key's name, which is agent text: they are not logged."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="engram_memory")
    service = connect("memory:", clock=ManualClock(), audit_ids=lambda: "audit-made-0001")
    (secret,) = distinctive_words("extra-key", 1)
    arguments = capture_args(make_key("extra-key"))
    arguments["payload"]["components"][0][f"pending {secret}"] = "value"

    envelope = service.call_tool(CAPTURE, arguments, A)

    fail(envelope, ErrorCode.INVALID_SCHEMA, retriable=False)
    assert envelope["auditId"] == "audit-made-0001"
    assert [record.getMessage() for record in _debug_records(caplog)] == [
        "engram_memory_capture answered INVALID_SCHEMA at /payload/components/0/* (auditId audit-made-0001)"
    ]
    assert secret not in _every_text(caplog.records)


def test_a_gate_failure_is_logged_without_a_pointer(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    candidate_id = harness.pending(A, make_key("gate-setup"))
    (secret,) = distinctive_words("gate-reason", 1)
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("gate"), "reason_ref": f"reason:{secret}"}
    stale = confirm(
        harness.service, WITHDRAW, arguments, A, harness.clock, approved_at=harness.clock.now() - timedelta(seconds=31)
    )
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="engram_memory")

    envelope = harness.call(WITHDRAW, arguments, stale)

    fail(envelope, ErrorCode.GATE_FAILED, retriable=False)
    assert [record.getMessage() for record in _debug_records(caplog)] == [
        f"engram_memory_withdraw answered gate_failed at - (auditId {envelope['auditId']})"
    ]
    assert secret not in _every_text(caplog.records)


def test_a_success_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="engram_memory")
    service = connect("memory:", clock=ManualClock())
    ok(service.call_tool(CAPTURE, capture_args(make_key("quiet")), A))
    assert _debug_records(caplog) == []


# --------------------------------------------------------------------------- connecting


def test_connect_names_the_store_it_cannot_open(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "dir" / "host.db"
    with pytest.raises(StoreUnavailableError) as refused:
        connect(f"sqlite:///{path}")
    assert str(refused.value) == "sqlite open failed: SQLITE_CANTOPEN"  # unchanged: the path is a note
    assert getattr(refused.value, "__notes__", []) == [f"opening the SQLite store {str(path)!r}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("with_key_file", [False, True], ids=["master-key", "key-file"])
def test_connect_names_the_key_vault_it_cannot_open(tmp_path: Path, with_key_file: bool) -> None:
    path = tmp_path / "host.db"
    url = f"sqlite:///{path}"
    if with_key_file:
        connect(url).close()
        (tmp_path / "host.db.key").write_bytes(bytes(32))  # another key than the vault's
        note = f"opening the SQLite key vault {str(path) + '.vault'!r} with the key file {str(path) + '.key'!r}"
        options: dict[str, Any] = {}
    else:
        connect(url, master_key=KEY).close()
        note = f"opening the SQLite key vault {str(path) + '.vault'!r}"
        options = {"master_key": bytes(32)}
    with pytest.raises(MasterKeyError) as refused:
        connect(url, **options)
    assert str(refused.value) == "the master key does not open this key vault"
    assert getattr(refused.value, "__notes__", []) == [note]


def test_a_service_that_opens_carries_on(tmp_path: Path) -> None:
    service: MemoryService = connect(f"sqlite:///{tmp_path / 'host.db'}", clock=ManualClock())
    try:
        ok(service.call_tool(CAPTURE, capture_args(make_key("opened")), A))
    finally:
        service.close()


# --------------------------------------------------------------------------- the host's audit ids, url and close


def _raises() -> str:
    raise RuntimeError("audit id service down")


@pytest.mark.parametrize(
    "made",
    [_raises, uuid.uuid4, lambda: "", lambda: "audit-\ud800", lambda: None],
    ids=["raises", "a UUID", "empty", "a lone surrogate", "None"],
)
def test_an_audit_id_the_host_cannot_make_is_32603_with_nothing_written(harness: Harness, made: Any) -> None:
    """``audit_ids`` is host code, like the binding: its failure is a protocol error, never an envelope."""
    service = MemoryService(
        store=harness.service.store, vault=harness.service.vault, policy=DefaultPolicy(), audit_ids=made
    )
    with pytest.raises(ProtocolError) as refused:
        service.call_tool(CAPTURE, capture_args(make_key("no-audit-id")), A)
    assert refused.value.code is JsonRpcCode.INTERNAL_ERROR
    assert harness.service.store.scopes() == []  # nothing written
    bound = attrs.evolve(A, audit_id="host-audit-7")  # a bound audit id never calls the generator
    assert ok(service.call_tool(CAPTURE, capture_args(make_key("bound-audit-id")), bound))["candidate_id"]


@pytest.mark.parametrize("made", [None, "audit-1", uuid.uuid4()], ids=["None", "a str", "a UUID"])
def test_audit_ids_that_are_not_callable_are_a_type_error_before_any_file(tmp_path: Path, made: Any) -> None:
    with pytest.raises(TypeError, match="audit_ids must be a callable"):
        MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), audit_ids=made)
    if made is not None:  # connect takes None for its default
        with pytest.raises(TypeError, match="audit_ids must be a callable"):
            connect(f"sqlite:///{tmp_path / 'host.db'}", audit_ids=made)
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", [None, b"memory:", Path("host.db")], ids=["None", "bytes", "a Path"])
def test_a_url_that_is_not_a_str_is_a_type_error_before_any_file(
    url: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match="url must be a str") as refused:
        connect(url)
    assert refused.value.__notes__ == [f"got {type(url).__name__}"]
    assert list(tmp_path.iterdir()) == []


class _StoreFailingToClose(InMemoryStore):
    def close(self) -> None:
        raise StoreUnavailableError("the final flush timed out")


class _ClosableVault(InMemoryKeyVault):
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_store_that_fails_to_close_still_lets_the_vault_close() -> None:
    vault = _ClosableVault()
    service = MemoryService(store=_StoreFailingToClose(), vault=vault)
    with pytest.raises(StoreUnavailableError):
        service.close()
    assert vault.closed == 1
    service.close()  # idempotent: the failure was answered once
    assert vault.closed == 1
