"""Arguments built from Python (the typed API) are refused like JSON ones: ``INVALID_SCHEMA`` at the field.

The JSON parser refuses a wrong type, a lone surrogate or a missing field before any argument class
is built. A caller of the typed API builds the classes directly, so their own validators must give
the same typed error, never a ``TypeError`` or ``UnicodeEncodeError`` from deep inside. A typed
operation given something that is not its argument class at all (a plain ``dict``) is a clear
``TypeError`` at the edge, before anything is read or written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import attrs
import pytest

from engram_memory import ALL_TOOLS, DefaultPolicy, ManualClock, MemoryService
from engram_memory.errors import EngramError, ErrorCode, JsonRpcCode, ProtocolError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import StoreReader, UnitOfWork
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import (
    ADMISSION,
    CAPTURE,
    FORGET,
    GET,
    PURPOSE,
    SEARCH,
    WITHDRAW,
    StoreWrapper,
    capture_args,
    make_binding,
    make_key,
)
from engram_memory.wire.args import Evidence, GetArgs, RequestAdmissionArgs, SearchArgs
from engram_memory.wire.converter import ARGS_BY_TOOL, parse_args

CANDIDATE = "candidate_" + "0" * 64
VALID: dict[str, dict[str, Any]] = {
    CAPTURE: capture_args(
        make_key("typed"),
        attestation="reviewed",
        retention={"derivative_rule": "make-ineligible", "expires_at": "2030-01-01T00:00:00.000Z"},
        reconciliation={"family_refs": ["family:a", "family:b"]},
    ),
    SEARCH: {"query": "typed arguments", "purpose_ref": PURPOSE, "page_cursor": "c3RhbGU"},
    GET: {"record_id": "mem_abc", "purpose_ref": PURPOSE},
    ADMISSION: {"candidate_id": CANDIDATE, "idempotency_key": make_key("typed-admission")},
    WITHDRAW: {"candidate_id": CANDIDATE, "idempotency_key": make_key("typed-withdraw"), "reason_ref": "reason:x"},
    FORGET: {"record_id": "mem_abc", "idempotency_key": make_key("typed-forget"), "reason_ref": "reason:x"},
}


def _string_fields(obj: Any, path: str = "") -> Iterator[tuple[str, Any, str, bool]]:
    """(pointer, the object holding it, field name, optional) of every string field, nested objects included.

    ``optional``: the field's default is ``None`` (it may be left out); any other field must hold a string.
    """
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if isinstance(value, str):
            yield f"{path}/{field.name}", obj, field.name, field.default is None
        elif attrs.has(type(value)):
            yield from _string_fields(value, f"{path}/{field.name}")
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                if attrs.has(type(item)):
                    yield from _string_fields(item, f"{path}/{field.name}/{index}")


CASES = [
    pytest.param(tool, pointer, id=f"{tool.removeprefix('engram_memory_')}{pointer}")
    for tool, args in VALID.items()
    for pointer, *_ in _string_fields(parse_args(ARGS_BY_TOOL[tool], args))
]


def _holder(tool: str, pointer: str) -> tuple[Any, str, bool]:
    for candidate, holder, name, optional in _string_fields(parse_args(ARGS_BY_TOOL[tool], VALID[tool])):
        if candidate == pointer:
            return holder, name, optional
    raise AssertionError(pointer)


def _refused(build: Any, name: str) -> EngramError:
    with pytest.raises(EngramError) as info:
        build()
    assert info.value.code is ErrorCode.INVALID_SCHEMA
    assert info.value.pointer == f"/{name}"
    return info.value


def test_every_tool_has_string_fields_to_check() -> None:
    tools = {param.values[0] for param in CASES}
    assert tools == set(VALID)
    assert len(CASES) >= 30


@pytest.mark.parametrize(("tool", "pointer"), CASES)
def test_a_string_field_refuses_another_type(tool: str, pointer: str) -> None:
    holder, name, _ = _holder(tool, pointer)
    for wrong in (5, b"bytes", 1.5, ["list"]):
        _refused(lambda wrong=wrong: attrs.evolve(holder, **{name: wrong}), name)


@pytest.mark.parametrize(("tool", "pointer"), CASES)
def test_a_string_field_refuses_a_lone_surrogate(tool: str, pointer: str) -> None:
    holder, name, _ = _holder(tool, pointer)
    error = _refused(lambda: attrs.evolve(holder, **{name: "a\ud800"}), name)
    assert error.public_message == "arguments do not match the closed schema"
    assert "\ud800" not in str(error)


@pytest.mark.parametrize(("tool", "pointer"), CASES)
def test_only_an_optional_string_field_takes_none(tool: str, pointer: str) -> None:
    holder, name, optional = _holder(tool, pointer)
    if optional:
        assert getattr(attrs.evolve(holder, **{name: None}), name) is None
    else:
        _refused(lambda: attrs.evolve(holder, **{name: None}), name)


def test_items_of_a_list_of_refs_are_checked_with_their_index() -> None:
    evidence = parse_args(ARGS_BY_TOOL[CAPTURE], VALID[CAPTURE]).evidence
    with pytest.raises(EngramError) as info:
        attrs.evolve(evidence, citation_ids=(evidence.citation_ids[0], 7))
    assert (info.value.code, info.value.pointer) == (ErrorCode.INVALID_SCHEMA, "/citation_ids/1")


def test_the_reported_examples_are_typed_errors() -> None:
    """The calls found raising ``UnicodeEncodeError``, ``TypeError`` or ``AttributeError`` before the fix."""
    refusals: list[tuple[Callable[[], object], str]] = [
        (lambda: SearchArgs(query="q", purpose_ref="\ud800"), "/purpose_ref"),
        (lambda: SearchArgs(query="\ud800", purpose_ref=PURPOSE), "/query"),
        (lambda: SearchArgs(query="q", purpose_ref=5), "/purpose_ref"),  # type: ignore[arg-type]
        (lambda: SearchArgs(query="q", purpose_ref=PURPOSE, page_cursor="\ud800"), "/page_cursor"),
        (lambda: RequestAdmissionArgs(candidate_id="\ud800", idempotency_key=make_key("x")), "/candidate_id"),
        (lambda: RequestAdmissionArgs(candidate_id=5, idempotency_key=make_key("x")), "/candidate_id"),  # type: ignore[arg-type]
        (lambda: GetArgs(record_id=5, purpose_ref=PURPOSE), "/record_id"),  # type: ignore[arg-type]
        (lambda: GetArgs(record_id=None, purpose_ref=PURPOSE), "/record_id"),  # type: ignore[arg-type]
        (
            lambda: Evidence(
                evidence_ref="e", evidence_digest="sha256:" + "0" * 64, citation_ids=("c",), attestation="\ud800"
            ),
            "/attestation",
        ),
        (lambda: Evidence(evidence_ref="e", evidence_digest=7, citation_ids=("c",)), "/evidence_digest"),  # type: ignore[arg-type]
    ]
    for build, pointer in refusals:
        with pytest.raises(EngramError) as info:
            build()
        assert (info.value.code, info.value.pointer) == (ErrorCode.INVALID_SCHEMA, pointer)


def _nested_fields(obj: Any, path: str = "") -> Iterator[tuple[str, Any, str, str, bool]]:
    """(pointer, holder, field name, kind, optional) of every object- or array-valued field, nested too.

    ``kind`` is ``"object"``, ``"array"`` (of strings) or ``"array of objects"``.
    """
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        optional = field.default is None
        if attrs.has(type(value)):
            yield f"{path}/{field.name}", obj, field.name, "object", optional
            yield from _nested_fields(value, f"{path}/{field.name}")
        elif isinstance(value, tuple):
            objects = bool(value) and all(attrs.has(type(item)) for item in value)
            yield f"{path}/{field.name}", obj, field.name, "array of objects" if objects else "array", optional
            for index, item in enumerate(value if objects else ()):
                yield from _nested_fields(item, f"{path}/{field.name}/{index}")


NESTED = [
    pytest.param(tool, pointer, id=f"{tool.removeprefix('engram_memory_')}{pointer}")
    for tool, args in VALID.items()
    for pointer, *_ in _nested_fields(parse_args(ARGS_BY_TOOL[tool], args))
]


@pytest.mark.parametrize(("tool", "pointer"), NESTED)
def test_a_nested_field_refuses_another_shape_as_a_typed_error(tool: str, pointer: str) -> None:
    """A ``dict``, a string, a number (or ``None`` where required) is ``INVALID_SCHEMA`` at construction.

    Before, such values raised ``AttributeError``/``TypeError`` in the constructor, or were taken and
    failed later inside ``search``/``capture``; a string in an array field became its characters.
    """
    found = {p: (h, n, k, o) for p, h, n, k, o in _nested_fields(parse_args(ARGS_BY_TOOL[tool], VALID[tool]))}
    holder, name, kind, optional = found[pointer]
    wrongs: list[Any] = [{"an": "object"}, "text", 5] if kind == "object" else ["text", 5, {"an": "object"}]
    wrongs += [] if optional else [None]
    for wrong in wrongs:
        _refused(lambda wrong=wrong: attrs.evolve(holder, **{name: wrong}), name)
    if kind == "array of objects":
        items = list(getattr(holder, name))
        with pytest.raises(EngramError) as info:
            attrs.evolve(holder, **{name: [*items, {"an": "object"}]})
        assert (info.value.code, info.value.pointer) == (ErrorCode.INVALID_SCHEMA, f"/{name}/{len(items)}")


def test_the_nested_fields_checked_cover_every_tool_with_nested_arguments() -> None:
    pointers = {param.values[1] for param in NESTED}
    assert {"/capability_policy", "/payload", "/evidence", "/payload/valid_time", "/payload/primary_event"} <= pointers
    assert {"/payload/components", "/payload/citations", "/payload/citations/0/locator"} <= pointers
    assert {"/payload/retention", "/payload/reconciliation", "/payload/reconciliation/family_refs"} <= pointers
    assert {"/evidence/citation_ids", "/payload/components/0/citation_ids"} <= pointers


def test_valid_typed_arguments_equal_the_parsed_ones() -> None:
    search = SearchArgs(query="typed arguments", purpose_ref=PURPOSE, page_cursor="c3RhbGU")
    assert search == parse_args(SearchArgs, VALID[SEARCH])
    assert GetArgs(record_id="mem_abc", purpose_ref=PURPOSE) == parse_args(GetArgs, VALID[GET])


# --- the typed operations refuse anything but their argument class ----------------------------------


class _Recording(StoreWrapper):
    """The in-memory store, with every read and write opened on it recorded."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore(secret=b"s" * 32))
        self.opened: list[str] = []

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        self.opened.append("read")
        return super().read(scope)

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        self.opened.append("write")
        return super().write(scope)


def _typed(tool: str) -> tuple[MemoryService, _Recording, Callable[[Any, Any], object]]:
    store = _Recording()
    service = MemoryService(store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(), clock=ManualClock())
    operation: Callable[[Any, Any], object] = getattr(service, tool.removeprefix("engram_memory_"))
    return service, store, operation


def _type_error(operation: Callable[[Any, Any], object], binding: Any, args: object) -> TypeError:
    with pytest.raises(TypeError) as info:
        operation(binding, args)
    return info.value


def _expected_message(tool: str) -> str:
    name = ARGS_BY_TOOL[tool].__name__
    return (
        f"MemoryService.{tool.removeprefix('engram_memory_')} takes a {name}: build one from a JSON object "
        f"with engram_memory.wire.parse_args({name}, raw), or pass the JSON object to call_tool"
    )


@pytest.mark.parametrize("tool", list(VALID), ids=lambda tool: tool.removeprefix("engram_memory_"))
def test_a_typed_operation_given_a_plain_dict_is_a_clear_type_error_and_touches_nothing(tool: str) -> None:
    service, store, operation = _typed(tool)
    raw = {**VALID[tool], "canary": "canary-5b1d-user-data"}
    error = _type_error(operation, make_binding(), raw)
    assert str(error) == _expected_message(tool)  # constant: the class to build and how
    assert error.__notes__ == ["got dict"]
    assert "canary" not in str(error)
    assert store.opened == []  # nothing read, nothing written
    assert service.store.scopes() == []


@pytest.mark.parametrize("tool", list(VALID), ids=lambda tool: tool.removeprefix("engram_memory_"))
def test_a_typed_operation_given_another_tools_arguments_is_the_same_type_error(tool: str) -> None:
    _, store, operation = _typed(tool)
    tools = list(VALID)
    other = tools[(tools.index(tool) + 1) % len(tools)]  # the next tool's; the last gets the first's
    args = parse_args(ARGS_BY_TOOL[other], VALID[other])
    error = _type_error(operation, make_binding(), args)
    assert str(error) == _expected_message(tool)
    assert error.__notes__ == [f"got {type(args).__name__}"]
    assert store.opened == []


@pytest.mark.parametrize("tool", list(VALID), ids=lambda tool: tool.removeprefix("engram_memory_"))
def test_a_binding_that_is_not_a_host_binding_stays_the_protocol_error_call_tool_raises(tool: str) -> None:
    """A plain dict as the binding is -32603 on the typed API too (as documented for ``call_tool``)."""
    _, store, operation = _typed(tool)
    binding = {"tenant_id": "tenant-a", "workspace_id": "workspace-1", "principal": "principal-1"}
    with pytest.raises(ProtocolError) as info:
        operation(binding, parse_args(ARGS_BY_TOOL[tool], VALID[tool]))
    assert info.value.code is JsonRpcCode.INTERNAL_ERROR
    assert info.value.__notes__ == ["no host binding: dict"]
    assert store.opened == []


@pytest.mark.parametrize("query", ["granted_tools", "list_tools"])
def test_the_host_queries_refuse_a_binding_that_is_not_a_host_binding(query: str) -> None:
    """``granted_tools`` and ``list_tools`` check the binding as every call does: -32603, never AttributeError."""
    service, store, _ = _typed(SEARCH)
    binding = {"tenant_id": "tenant-a", "workspace_id": "workspace-1", "principal": "principal-1"}
    with pytest.raises(ProtocolError) as info:
        getattr(service, query)(binding)
    assert info.value.code is JsonRpcCode.INTERNAL_ERROR
    assert info.value.__notes__ == ["no host binding: dict"]
    assert store.opened == []
    assert service.granted_tools(make_binding()) == ALL_TOOLS
