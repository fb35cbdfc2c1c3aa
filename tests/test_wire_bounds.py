"""Every bound of the contract at bound - 1, bound and bound + 1, and every strictness rule of the parser.

Each rejection is checked for its code *and* its JSON pointer. Byte bounds are probed with a
3-byte character ("€") at the edge, so the character count stays under the bound while the byte
count is over it.
"""

from __future__ import annotations

import copy
import json
import sys
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.canonical import canonical_bytes
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import make_binding
from engram_memory.wire import (
    ARGS_BY_TOOL,
    CaptureArgs,
    SearchArgs,
    input_schema,
    parse_args,
    parse_json,
    unstructure_args,
)
from engram_memory.wire import converter as converter_module
from engram_memory.wire.args import Component
from engram_memory.wire.converter import MAX_NESTING, MAX_RAW_JSON_BYTES
from tests.wire_strategies import (
    BAD_DIGESTS,
    BAD_INSTANTS,
    BAD_RECORD_IDS,
    COMPOSES_3_TO_2,
    EURO,
    MAX_SAFE,
    TOOLS,
    sized,
    under_bytes,
)

Json = Any
SCHEMA: Final = ErrorCode.INVALID_SCHEMA
DIGEST: Final = ErrorCode.INVALID_DIGEST
D: Final = "sha256:" + "0" * 64
KEY: Final = "idempotency-key-0001"
ONE_MIB: Final = 1_048_576
_DELETE: Final = object()
Expected = tuple[ErrorCode, str] | None
"""``None``: accepted; else the code and JSON pointer of the rejection."""


# --------------------------------------------------------------------------- base arguments


def _capture() -> dict[str, Json]:
    return {
        "idempotency_key": KEY,
        "payload": {
            "schema_version": 2,
            "purpose_ref": "purpose-1",
            "valid_time": {"t": 1000, "t_end": 2000},
            "components": [
                {"component_id": "k1", "kind": "decision", "text": "Use WAL mode.", "citation_ids": ["c1"]},
                {
                    "component_id": "k2",
                    "kind": "context",
                    "text": "Readers block writers otherwise.",
                    "citation_ids": ["c1", "c2"],
                },
            ],
            "primary_component_id": "k1",
            "primary_event": {"at": 1500, "type_ref": "decided", "citation_id": "c1"},
            "citations": [
                {
                    "citation_id": "c1",
                    "source_ref": "adr-7",
                    "locator": {"scheme": "line", "value": "3"},
                    "content_digest": D,
                    "observed_at": "2026-01-01T00:00:00.000Z",
                },
                {
                    "citation_id": "c2",
                    "source_ref": "adr-8",
                    "locator": {"scheme": "line", "value": "9"},
                    "content_digest": D,
                },
            ],
            "retention": {"derivative_rule": "make-ineligible", "expires_at": "2027-01-01T00:00:00.000Z"},
            "reconciliation": {"family_refs": ["fam-a", "fam-b"]},
        },
        "evidence": {
            "evidence_ref": "ev-1",
            "evidence_digest": D,
            "citation_ids": ["c2"],
            "attestation": "checked by hand",
        },
    }


BASES: Final[Mapping[str, dict[str, Json]]] = {
    "engram_memory_search": {
        "query": "sqlite wal mode",
        "purpose_ref": "purpose-1",
        "limit": 10,
        "max_packet_bytes": 65_536,
        "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        "page_cursor": "cursor-1",
    },
    "engram_memory_get": {"record_id": "mem_abc234", "purpose_ref": "purpose-1", "max_packet_bytes": 65_536},
    "engram_memory_capture": _capture(),
    "engram_memory_request_admission": {"candidate_id": "candidate_1", "idempotency_key": KEY},
    "engram_memory_withdraw": {"candidate_id": "candidate_1", "idempotency_key": KEY, "reason_ref": "mistake"},
    "engram_memory_forget": {"record_id": "mem_abc234", "idempotency_key": KEY, "reason_ref": "wrong"},
}
"""One valid argument object per tool, with every optional field present."""

OPTIONAL: Final = frozenset(
    {
        "limit",
        "max_packet_bytes",
        "capability_policy",
        "page_cursor",
        "minimum_channels",
        "network",
        "t_end",
        "observed_at",
        "retention",
        "reconciliation",
        "expires_at",
        "attestation",
    }
)

# Values that refer to each other in the base capture: renaming one means renaming the group.
C1_GROUP: Final = (
    "/payload/citations/0/citation_id",
    "/payload/components/0/citation_ids/0",
    "/payload/components/1/citation_ids/0",
    "/payload/primary_event/citation_id",
)
C2_GROUP: Final = (
    "/payload/citations/1/citation_id",
    "/payload/components/1/citation_ids/1",
    "/evidence/citation_ids/0",
)
K1_GROUP: Final = ("/payload/components/0/component_id", "/payload/primary_component_id")
GROUPS: Final = {pointer: group for group in (C1_GROUP, C2_GROUP, K1_GROUP) for pointer in group}


def _segments(pointer: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]


def edited(tool: str, edits: Mapping[str, Json], base: dict[str, Json] | None = None) -> dict[str, Json]:
    """A deep copy of the base arguments with each JSON pointer set (or deleted with ``_DELETE``)."""
    out = copy.deepcopy(BASES[tool] if base is None else base)
    for pointer, value in edits.items():
        *parents, last = _segments(pointer)
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is _DELETE:
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


def consistent(tool: str, pointer: str, value: Json) -> dict[str, Json]:
    """Set ``pointer`` and every value that must stay equal to it."""
    group = GROUPS.get(pointer, (pointer,)) if tool == "engram_memory_capture" else (pointer,)
    return edited(tool, dict.fromkeys(group, value))


def check(tool: str, arguments: Json, expected: Expected) -> Any:
    """Parse and compare with the expectation; return the typed arguments when accepted."""
    if expected is None:
        return parse_args(ARGS_BY_TOOL[tool], arguments)
    with pytest.raises(EngramError) as info:
        parse_args(ARGS_BY_TOOL[tool], arguments)
    assert (info.value.code, info.value.pointer) == expected
    return None


def case(tool: str, arguments: Json, expected: Expected, name: str) -> Any:
    short = tool.removeprefix("engram_memory_")
    return pytest.param(tool, arguments, expected, id=f"{short}:{name}")


def _item_pointer(pointer: str) -> bool:
    return pointer.rsplit("/", 1)[-1].isdigit()


# --------------------------------------------------------------------------- the argument bound after NFC

_EXPANDS: Final = "\U0001d160"
"""MUSICAL SYMBOL EIGHTH NOTE: 4 UTF-8 bytes, 12 once in NFC (three code points)."""


def _expanding_capture(components: int, characters: int) -> dict[str, Json]:
    args = capture_lists(components=components)
    for component in args["payload"]["components"]:
        component["text"] = _EXPANDS * characters  # within the 65,536-byte text bound in NFC
    return args


def _sizes(arguments: Json) -> tuple[int, int]:
    """The compact JSON bytes of ``arguments`` as sent, and of the typed arguments they become (NFC)."""
    sent = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode())
    return sent, len(
        json.dumps(unstructure_args(_typed(arguments)), ensure_ascii=False, separators=(",", ":")).encode()
    )


def _typed(arguments: Json) -> Any:
    """The typed capture arguments of ``arguments``, structured without the byte bound."""
    return converter_module._CONVERTER.structure(arguments, ARGS_BY_TOOL["engram_memory_capture"])


def test_arguments_within_the_bound_as_sent_but_over_it_in_nfc_are_refused_as_the_typed_api_refuses_them() -> None:
    """NFC lengthens some characters threefold: the bound holds for the normalised arguments too,
    so ``call_tool`` and the typed API agree (neither stores a record no read could return)."""
    arguments = _expanding_capture(components=47, characters=5_400)
    sent, normalised = _sizes(arguments)
    assert sent < 1_048_576 < normalised
    check("engram_memory_capture", arguments, (SCHEMA, ""))
    typed = _typed(arguments)
    service = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy())
    with pytest.raises(EngramError) as refused:
        service.capture(make_binding(purpose_ref="purpose-1"), typed)
    assert (refused.value.code, refused.value.pointer) == (SCHEMA, "")


def test_non_ascii_arguments_within_the_bound_in_nfc_are_accepted() -> None:
    arguments = _expanding_capture(components=10, characters=5_400)
    sent, normalised = _sizes(arguments)
    assert sent < normalised < 1_048_576
    assert check("engram_memory_capture", arguments, None) is not None


# --------------------------------------------------------------------------- byte-bounded strings

STRING_FIELDS: Final = (
    ("engram_memory_search", "/query", 1, 8192),
    ("engram_memory_search", "/purpose_ref", 1, 512),
    ("engram_memory_search", "/page_cursor", 1, 512),
    ("engram_memory_get", "/purpose_ref", 1, 512),
    ("engram_memory_capture", "/idempotency_key", 16, 256),
    ("engram_memory_capture", "/payload/purpose_ref", 1, 512),
    ("engram_memory_capture", "/payload/components/1/component_id", 1, 512),
    ("engram_memory_capture", "/payload/components/0/text", 1, 65_536),
    ("engram_memory_capture", "/payload/components/1/citation_ids/1", 1, 512),
    ("engram_memory_capture", "/payload/primary_component_id", 1, 512),
    ("engram_memory_capture", "/payload/primary_event/type_ref", 1, 512),
    ("engram_memory_capture", "/payload/primary_event/citation_id", 1, 512),
    ("engram_memory_capture", "/payload/citations/1/citation_id", 1, 512),
    ("engram_memory_capture", "/payload/citations/0/source_ref", 1, 512),
    ("engram_memory_capture", "/payload/citations/0/locator/scheme", 1, 512),
    ("engram_memory_capture", "/payload/citations/0/locator/value", 1, 512),
    ("engram_memory_capture", "/payload/reconciliation/family_refs/0", 1, 512),
    ("engram_memory_capture", "/evidence/evidence_ref", 1, 512),
    ("engram_memory_capture", "/evidence/citation_ids/0", 1, 512),
    ("engram_memory_capture", "/evidence/attestation", 0, 4096),
    ("engram_memory_request_admission", "/candidate_id", 1, 512),
    ("engram_memory_request_admission", "/idempotency_key", 16, 256),
    ("engram_memory_withdraw", "/candidate_id", 1, 512),
    ("engram_memory_withdraw", "/idempotency_key", 16, 256),
    ("engram_memory_withdraw", "/reason_ref", 1, 512),
    ("engram_memory_forget", "/idempotency_key", 16, 256),
    ("engram_memory_forget", "/reason_ref", 1, 512),
)


def _string_cases() -> Iterator[Any]:
    for tool, pointer, low, high in STRING_FIELDS:
        if low > 0:
            yield case(tool, edited(tool, {pointer: under_bytes(low - 1)}), (SCHEMA, pointer), f"{pointer}={low - 1}B")
        for size in sorted({low, low + 1, high - 1, high}):
            yield case(tool, consistent(tool, pointer, sized(size)), None, f"{pointer}={size}B")
        yield case(tool, edited(tool, {pointer: sized(high + 1)}), (SCHEMA, pointer), f"{pointer}={high + 1}B")


@pytest.mark.parametrize(("tool", "arguments", "expected"), list(_string_cases()))
def test_string_byte_bounds(tool: str, arguments: Json, expected: Expected) -> None:
    """Strings are bounded in UTF-8 bytes (after NFC for free text); the pointer names the string.

    An invalid item of a list names the item (``/citation_ids/0``), as a wrong-typed item does.
    """
    check(tool, arguments, expected)


def test_sized_strings_have_fewer_characters_than_bytes() -> None:
    over = sized(513)
    assert len(over.encode("utf-8")) == 513
    assert len(over) == 511
    assert over.endswith(EURO)


# --------------------------------------------------------------------------- record ids

RECORD_ID_CASES: Final = [
    *(
        case(tool, edited(tool, {"/record_id": "mem_" + "a" * n}), None, f"record_id={4 + n}B")
        for tool in ("engram_memory_get", "engram_memory_forget")
        for n in (1, 2, 507, 508)
    ),
    *(
        case(tool, edited(tool, {"/record_id": bad}), (SCHEMA, "/record_id"), f"record_id={bad!r}")
        for tool in ("engram_memory_get", "engram_memory_forget")
        for bad in BAD_RECORD_IDS
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "expected"), RECORD_ID_CASES)
def test_record_id_pattern_and_length(tool: str, arguments: Json, expected: Expected) -> None:
    """record_id matches ^mem_[a-z2-7]+$ (no trailing newline) and is at most 512 bytes."""
    check(tool, arguments, expected)


# --------------------------------------------------------------------------- integers

INT_FIELDS: Final[tuple[tuple[str, str, int, int, dict[str, Any]], ...]] = (
    ("engram_memory_search", "/limit", 1, 50, {}),
    ("engram_memory_search", "/max_packet_bytes", 4096, 1_048_576, {}),
    ("engram_memory_get", "/max_packet_bytes", 4096, 1_048_576, {}),
    ("engram_memory_capture", "/payload/valid_time/t", -MAX_SAFE, MAX_SAFE, {"/payload/valid_time/t_end": _DELETE}),
    ("engram_memory_capture", "/payload/valid_time/t_end", -MAX_SAFE, MAX_SAFE, {"/payload/valid_time/t": -MAX_SAFE}),
    ("engram_memory_capture", "/payload/primary_event/at", -MAX_SAFE, MAX_SAFE, {}),
)


def _integer_cases() -> Iterator[Any]:
    for tool, pointer, low, high, context in INT_FIELDS:
        for value in (low - 1, high + 1):
            yield case(tool, edited(tool, {**context, pointer: value}), (SCHEMA, pointer), f"{pointer}={value}")
        for value in (low, low + 1, high - 1, high):
            yield case(tool, edited(tool, {**context, pointer: value}), None, f"{pointer}={value}")


@pytest.mark.parametrize(("tool", "arguments", "expected"), list(_integer_cases()))
def test_integer_bounds(tool: str, arguments: Json, expected: Expected) -> None:
    """Integers at each bound pass; one past fails (2**53 and -(2**53) are unsafe)."""
    check(tool, arguments, expected)


@pytest.mark.parametrize("pointer", ["/payload/valid_time/t", "/payload/primary_event/at"])
@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64, float(2**53)])
def test_unsafe_integers_are_refused(pointer: str, value: float) -> None:
    tool = "engram_memory_capture"
    check(tool, edited(tool, {pointer: value, "/payload/valid_time/t_end": _DELETE}), (SCHEMA, pointer))


@pytest.mark.parametrize(
    ("pointer", "value"),
    [("/payload/valid_time/t", -1.0), ("/payload/primary_event/at", -1500.0), ("/payload/valid_time/t_end", -5.0)],
)
def test_negative_integral_numbers_are_integers(pointer: str, value: float) -> None:
    """-1.0 is the integer -1, exactly as 10.0 is the integer 10 (only -0 is refused)."""
    tool = "engram_memory_capture"
    typed = check(tool, edited(tool, {"/payload/valid_time/t": -MAX_SAFE, pointer: value}), None)
    assert isinstance(typed, CaptureArgs)


# --------------------------------------------------------------------------- list lengths


def capture_lists(
    *, citations: int = 2, components: int = 2, cited: int = 1, evidence: int = 1, families: int = 2
) -> dict[str, Json]:
    """A consistent capture with the given list lengths (ids c0.., k0.., f000..)."""
    args = _capture()
    payload = args["payload"]
    citation_ids = [f"c{i}" for i in range(citations)]
    payload["citations"] = [{**payload["citations"][1], "citation_id": cid} for cid in citation_ids]
    payload["components"] = [
        {
            "component_id": f"k{i}",
            "kind": "context",
            "text": "text",
            "citation_ids": [f"c{j}" for j in range(cited)] if i == 0 else ["c0"],
        }
        for i in range(components)
    ]
    payload["primary_component_id"] = "k0"
    payload["primary_event"]["citation_id"] = "c0"
    payload["reconciliation"]["family_refs"] = [f"f{i:03d}" for i in range(families)]
    args["evidence"]["citation_ids"] = [f"c{i}" for i in range(evidence)]
    return args


LIST_FIELDS: Final = (
    ("/payload/components", 1, 64, "components"),
    ("/payload/citations", 1, 256, "citations"),
    ("/payload/components/0/citation_ids", 1, 256, "cited"),
    ("/evidence/citation_ids", 1, 256, "evidence"),
    ("/payload/reconciliation/family_refs", 0, 64, "families"),
)


def _list_cases() -> Iterator[Any]:
    tool = "engram_memory_capture"
    for pointer, low, high, knob in LIST_FIELDS:
        for count in (low - 1, low, low + 1, high - 1, high, high + 1):
            if count < 0:
                continue
            sizes = {knob: count}
            if knob in {"cited", "evidence"}:
                sizes["citations"] = min(max(count, 1), 256)
            expected: Expected = None if low <= count <= high else (SCHEMA, pointer)
            yield case(tool, capture_lists(**sizes), expected, f"{pointer}={count}")


@pytest.mark.parametrize(("tool", "arguments", "expected"), list(_list_cases()))
def test_list_lengths(tool: str, arguments: Json, expected: Expected) -> None:
    check(tool, arguments, expected)


def _floods() -> Iterator[Any]:
    """Arrays far over their bound whose every item is invalid, each argument object under 1 MiB."""
    for pointer, _, high, _ in LIST_FIELDS:
        args = _capture()
        parent: Any = args
        *path, name = pointer.strip("/").split("/")
        for part in path:
            parent = parent[int(part)] if part.isdigit() else parent[part]
        parent[name] = [{"zz": 1}] * 100_000
        yield pytest.param(args, pointer, high, id=pointer)


def _leaves(failure: BaseException | None) -> list[BaseException]:
    """The failures inside ``failure``'s exception groups (itself if it is none)."""
    leaves: list[BaseException] = []
    pending = [failure] if failure is not None else []
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    return leaves


@pytest.mark.parametrize(("arguments", "pointer", "high"), list(_floods()))
def test_an_array_over_its_bound_is_refused_before_its_items_are_structured(
    arguments: Json, pointer: str, high: int
) -> None:
    """100,000 invalid items (an argument under 1 MiB) are refused at the array, by its length, with
    no item's failure behind it: items were structured first, each refusal keeping a traceback
    (seconds and gigabytes for the whole array), and the first item's failure was the answer."""
    assert len(json.dumps(arguments, separators=(",", ":")).encode()) < 1_048_576
    with pytest.raises(EngramError) as refused:
        parse_args(ARGS_BY_TOOL["engram_memory_capture"], arguments)
    assert (refused.value.code, refused.value.pointer) == (SCHEMA, pointer)
    assert any(f"list has 100000 items, allowed at most {high}" in note for note in refused.value.__notes__)
    assert all(isinstance(leaf, EngramError) for leaf in _leaves(refused.value.__cause__))
    assert len(_leaves(refused.value.__cause__)) == 1


def test_an_array_stops_at_its_first_invalid_item() -> None:
    """Within its bound, an array of invalid items reports the first, and keeps no other's failure."""
    args = capture_lists(components=64)
    for component in args["payload"]["components"]:
        component["citation_ids"] = [{"zz": 1}] * 256  # 16,384 invalid items in all
    with pytest.raises(EngramError) as refused:
        parse_args(ARGS_BY_TOOL["engram_memory_capture"], args)
    assert (refused.value.code, refused.value.pointer) == (SCHEMA, "/payload/components/0/citation_ids/0")
    assert len(_leaves(refused.value.__cause__)) == 1


# --------------------------------------------------------------------------- structure and types


def _nodes(value: Json, pointer: str = "") -> Iterator[tuple[str, Json]]:
    yield pointer, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, f"{pointer}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, f"{pointer}/{index}")


def _structure_cases() -> Iterator[Any]:
    for tool in TOOLS:
        for pointer, value in _nodes(BASES[tool]):
            if isinstance(value, dict):
                extra = f"{pointer}/zz_extra"
                yield case(tool, edited(tool, {extra: "x"}), (SCHEMA, extra), f"extra {extra}")
            if not pointer:
                continue
            name = pointer.rsplit("/", 1)[-1]
            if not name.isdigit():
                removed: Expected = None if name in OPTIONAL else (SCHEMA, pointer)
                yield case(tool, edited(tool, {pointer: _DELETE}), removed, f"missing {pointer}")
                yield case(tool, edited(tool, {pointer: None}), (SCHEMA, pointer), f"null {pointer}")
            wrong = "x" if isinstance(value, list | dict) else []
            yield case(tool, edited(tool, {pointer: wrong}), (SCHEMA, pointer), f"wrong type {pointer}")


@pytest.mark.parametrize(("tool", "arguments", "expected"), list(_structure_cases()))
def test_structure(tool: str, arguments: Json, expected: Expected) -> None:
    """Extra properties at every level, missing fields, null for any field and wrong types."""
    check(tool, arguments, expected)


def _integer_type_cases() -> Iterator[Any]:
    for tool in TOOLS:
        for pointer, value in _nodes(BASES[tool]):
            if type(value) is not int:
                continue
            for bad in (True, False, str(value), value + 0.5, [value]):
                yield case(tool, edited(tool, {pointer: bad}), (SCHEMA, pointer), f"{pointer}={bad!r}")
            yield case(tool, edited(tool, {pointer: float(value)}), None, f"{pointer}={float(value)!r}")


@pytest.mark.parametrize(("tool", "arguments", "expected"), list(_integer_type_cases()))
def test_integer_types(tool: str, arguments: Json, expected: Expected) -> None:
    """Booleans, numeric strings and fractions are not integers; an integral number is."""
    typed = check(tool, arguments, expected)
    if typed is not None:
        assert typed == parse_args(ARGS_BY_TOOL[tool], BASES[tool])


@pytest.mark.parametrize(
    ("tool", "pointer", "value"),
    [
        ("engram_memory_search", "/capability_policy/minimum_channels", "semantic"),
        ("engram_memory_search", "/capability_policy/network", "Allow"),
        ("engram_memory_capture", "/payload/components/0/kind", "note"),
        ("engram_memory_capture", "/payload/retention/derivative_rule", "keep"),
        ("engram_memory_capture", "/payload/schema_version", 1),
        ("engram_memory_capture", "/payload/schema_version", 3),
    ],
)
def test_enums_and_constants(tool: str, pointer: str, value: Json) -> None:
    check(tool, edited(tool, {pointer: value}), (SCHEMA, pointer))


# --------------------------------------------------------------------------- the typed API


def rebuilt(typed: Any, pointer: str, value: Json) -> Any:
    """``typed`` with the field at ``pointer`` replaced, every enclosing object constructed anew."""
    first, *rest = _segments(pointer)
    if isinstance(typed, tuple):
        index = int(first)
        item = rebuilt(typed[index], "/" + "/".join(rest), value)
        return (*typed[:index], item, *typed[index + 1 :])
    return attrs.evolve(
        typed, **{first: rebuilt(getattr(typed, first), "/" + "/".join(rest), value) if rest else value}
    )


TYPED_CASES: Final = [
    ("engram_memory_search", "/capability_policy/minimum_channels", "semantic_only"),
    ("engram_memory_search", "/capability_policy/network", "yes"),
    ("engram_memory_capture", "/payload/components/0/kind", "secret-note"),
    ("engram_memory_capture", "/payload/retention/derivative_rule", "keep-forever"),
    ("engram_memory_capture", "/payload/schema_version", 3),
    ("engram_memory_capture", "/payload/schema_version", 2.0),
    ("engram_memory_capture", "/payload/schema_version", "2"),
    ("engram_memory_search", "/limit", 2.5),
    ("engram_memory_search", "/limit", 10.0),
    ("engram_memory_search", "/limit", True),
    ("engram_memory_search", "/limit", "10"),
    ("engram_memory_search", "/limit", 51),
    ("engram_memory_search", "/max_packet_bytes", 65_536.0),
    ("engram_memory_get", "/max_packet_bytes", 4_095),
    ("engram_memory_capture", "/payload/valid_time/t", 1.5),
    ("engram_memory_capture", "/payload/valid_time/t", True),
    ("engram_memory_capture", "/payload/valid_time/t", None),
    ("engram_memory_capture", "/payload/valid_time/t", -(2**53)),
    ("engram_memory_capture", "/payload/valid_time/t_end", 2000.0),
    ("engram_memory_capture", "/payload/valid_time/t_end", 2**53),
    ("engram_memory_capture", "/payload/primary_event/at", "1500"),
    ("engram_memory_capture", "/payload/primary_event/at", False),
]


@pytest.mark.parametrize(("tool", "pointer", "value"), TYPED_CASES)
def test_direct_construction_runs_the_parser_checks(tool: str, pointer: str, value: Json) -> None:
    """The typed API refuses what JSON refuses, with the field's own pointer (``/kind`` in a Component)."""
    typed = parse_args(ARGS_BY_TOOL[tool], BASES[tool])
    with pytest.raises(EngramError) as info:
        rebuilt(typed, pointer, value)
    assert (info.value.code, info.value.pointer) == (SCHEMA, "/" + _segments(pointer)[-1])
    assert not info.value.retriable
    if not (type(value) is float and value.is_integer()):  # JSON writes the integer 10 as 10.0 too
        check(tool, edited(tool, {pointer: value}), (SCHEMA, pointer))


@pytest.mark.parametrize(
    ("tool", "pointer", "value"),
    [
        ("engram_memory_search", "/capability_policy/minimum_channels", "lexical_and_semantic"),
        ("engram_memory_search", "/capability_policy/network", "allow"),
        ("engram_memory_capture", "/payload/components/0/kind", "evidence"),
        ("engram_memory_capture", "/payload/retention/derivative_rule", "retain"),
        ("engram_memory_capture", "/payload/schema_version", 2),
        ("engram_memory_search", "/limit", 50),
        ("engram_memory_capture", "/payload/valid_time/t", -MAX_SAFE),
        ("engram_memory_capture", "/payload/primary_event/at", MAX_SAFE),
    ],
)
def test_direct_construction_accepts_what_json_accepts(tool: str, pointer: str, value: Json) -> None:
    typed = parse_args(ARGS_BY_TOOL[tool], BASES[tool])
    assert rebuilt(typed, pointer, value) == parse_args(ARGS_BY_TOOL[tool], edited(tool, {pointer: value}))


def test_arguments_must_be_an_object() -> None:
    raws: tuple[Json, ...] = ([], "x", 1, None)
    for raw in raws:
        check("engram_memory_get", raw, (SCHEMA, ""))


# --------------------------------------------------------------------------- NFC

REF_POINTERS: Final = (
    ("engram_memory_search", "/purpose_ref"),
    ("engram_memory_get", "/purpose_ref"),
    ("engram_memory_capture", "/idempotency_key"),
    ("engram_memory_capture", "/payload/purpose_ref"),
    ("engram_memory_capture", "/payload/components/1/component_id"),
    ("engram_memory_capture", "/payload/components/1/citation_ids/1"),
    ("engram_memory_capture", "/payload/primary_component_id"),
    ("engram_memory_capture", "/payload/primary_event/type_ref"),
    ("engram_memory_capture", "/payload/primary_event/citation_id"),
    ("engram_memory_capture", "/payload/citations/1/citation_id"),
    ("engram_memory_capture", "/payload/citations/0/source_ref"),
    ("engram_memory_capture", "/payload/citations/0/locator/scheme"),
    ("engram_memory_capture", "/payload/citations/0/locator/value"),
    ("engram_memory_capture", "/payload/reconciliation/family_refs/1"),
    ("engram_memory_capture", "/evidence/evidence_ref"),
    ("engram_memory_capture", "/evidence/citation_ids/0"),
    ("engram_memory_request_admission", "/idempotency_key"),
    ("engram_memory_withdraw", "/idempotency_key"),
    ("engram_memory_withdraw", "/reason_ref"),
    ("engram_memory_forget", "/idempotency_key"),
    ("engram_memory_forget", "/reason_ref"),
)


@pytest.mark.parametrize(("tool", "pointer"), REF_POINTERS)
def test_refs_and_keys_must_already_be_nfc(tool: str, pointer: str) -> None:
    """A decomposed ref or key is refused, even though it is canonically equivalent."""
    decomposed = "e\u0301" + "-0123456789abcdef"  # NFC would be "\u00e9-..."; 16+ bytes for keys
    check(tool, edited(tool, {pointer: decomposed}), (SCHEMA, pointer))
    composed = "\u00e9-0123456789abcdef"
    check(tool, consistent(tool, pointer, composed), None)


@pytest.mark.parametrize(
    ("tool", "pointer", "attribute"),
    [
        ("engram_memory_search", "/page_cursor", "page_cursor"),
        ("engram_memory_request_admission", "/candidate_id", "candidate_id"),
        ("engram_memory_withdraw", "/candidate_id", "candidate_id"),
    ],
)
def test_copied_values_are_kept_verbatim(tool: str, pointer: str, attribute: str) -> None:
    typed = check(tool, edited(tool, {pointer: "e\u0301"}), None)
    assert getattr(typed, attribute) == "e\u0301"


@pytest.mark.parametrize(
    ("attestation", "expected"),
    [
        pytest.param("e\u0301" * 2048, None, id="6144-raw-bytes-4096-nfc"),
        pytest.param("e\u0301" * 2048 + "a", (SCHEMA, "/evidence/attestation"), id="4097-nfc"),
        pytest.param("\ufb2c" * 683, (SCHEMA, "/evidence/attestation"), id="2049-raw-bytes-4098-nfc"),
        pytest.param("\ufb2c" * 682, None, id="2046-raw-bytes-4092-nfc"),
    ],
)
def test_attestation_is_normalised_and_bounded_after_nfc(attestation: str, expected: Expected) -> None:
    """The attestation is free text like the others: stored in NFC, so bounded in NFC (4,096 bytes)."""
    tool = "engram_memory_capture"
    typed = check(tool, edited(tool, {"/evidence/attestation": attestation}), expected)
    if expected is None:
        assert isinstance(typed, CaptureArgs)
        assert typed.evidence.attestation == unicodedata.normalize("NFC", attestation)


def test_query_is_normalised_to_nfc() -> None:
    typed = check("engram_memory_search", edited("engram_memory_search", {"/query": "cafe\u0301"}), None)
    assert isinstance(typed, SearchArgs)
    assert typed.query == "caf\u00e9"


def test_component_text_is_normalised_to_nfc() -> None:
    tool = "engram_memory_capture"
    typed = check(tool, edited(tool, {"/payload/components/0/text": "A\u030a ring"}), None)
    assert typed.payload.components[0].text == "\u00c5 ring"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("e\u0301" * 4096, None, id="12288-raw-bytes-8192-nfc"),
        pytest.param(COMPOSES_3_TO_2 * 4096, None, id="12288-code-points-8192-nfc"),
        pytest.param("e\u0301" * 4096 + "a", (SCHEMA, "/query"), id="8193-nfc"),
        pytest.param("\ufb2c" * 1366, (SCHEMA, "/query"), id="4098-raw-bytes-8196-nfc"),
        pytest.param("\ufb2c" * 1365, None, id="4095-raw-bytes-8190-nfc"),
    ],
)
def test_free_text_bound_applies_to_the_normalised_text(query: str, expected: Expected) -> None:
    check("engram_memory_search", edited("engram_memory_search", {"/query": query}), expected)


# --------------------------------------------------------------------------- cross-references

CROSS_REFERENCE_CASES: Final = [
    pytest.param({"/payload/citations/1/citation_id": "c1"}, "/payload/citations/1/citation_id", id="dup-citation-id"),
    pytest.param(
        {"/payload/components/1/component_id": "k1"}, "/payload/components/1/component_id", id="dup-component-id"
    ),
    pytest.param(
        {"/payload/components/1/citation_ids/1": "c9"},
        "/payload/components/1/citation_ids/1",
        id="component-cites-unknown",
    ),
    pytest.param(
        {"/payload/components/1/citation_ids/1": "c1"},
        "/payload/components/1/citation_ids",
        id="dup-citation-in-component",
    ),
    pytest.param({"/payload/primary_component_id": "k9"}, "/payload/primary_component_id", id="unknown-primary"),
    pytest.param(
        {"/payload/primary_event/citation_id": "c9"}, "/payload/primary_event/citation_id", id="event-cites-unknown"
    ),
    pytest.param(
        {"/payload/primary_event/citation_id": "c2"},
        "/payload/primary_event/citation_id",
        id="event-citation-not-in-primary",
    ),
    pytest.param({"/evidence/citation_ids/0": "c9"}, "/evidence/citation_ids/0", id="evidence-cites-unknown"),
    pytest.param({"/evidence/citation_ids": ["c2", "c2"]}, "/evidence/citation_ids", id="dup-evidence-citation"),
    pytest.param({"/payload/valid_time/t_end": 999}, "/payload/valid_time/t_end", id="t_end-before-t"),
]


@pytest.mark.parametrize(("edits", "pointer"), CROSS_REFERENCE_CASES)
def test_broken_cross_references(edits: dict[str, Json], pointer: str) -> None:
    check("engram_memory_capture", edited("engram_memory_capture", edits), (SCHEMA, pointer))


def test_t_end_equal_to_t_is_accepted() -> None:
    typed = check("engram_memory_capture", edited("engram_memory_capture", {"/payload/valid_time/t_end": 1000}), None)
    assert typed.payload.valid_time.t_end == typed.payload.valid_time.t == 1000


def test_primary_event_may_cite_any_citation_of_the_primary_component() -> None:
    edits = {"/payload/primary_component_id": "k2", "/payload/primary_event/citation_id": "c2"}
    check("engram_memory_capture", edited("engram_memory_capture", edits), None)


@pytest.mark.parametrize(
    ("families", "expected"),
    [
        pytest.param(["b", "a"], (SCHEMA, "/payload/reconciliation/family_refs"), id="unsorted"),
        pytest.param(["a", "a"], (SCHEMA, "/payload/reconciliation/family_refs"), id="duplicate"),
        pytest.param(["a", "b", "a"], (SCHEMA, "/payload/reconciliation/family_refs"), id="unsorted-duplicate"),
        pytest.param([], None, id="empty-opts-out"),
        pytest.param(["A", "B", "a", "b"], None, id="ascii-order"),
        # U+1F600 is D83D DE00 in UTF-16, below U+FF61: the order is by UTF-16 code units.
        pytest.param(["\U0001f600", "\uff61"], None, id="utf16-order"),
        pytest.param(["\uff61", "\U0001f600"], (SCHEMA, "/payload/reconciliation/family_refs"), id="code-point-order"),
    ],
)
def test_family_refs_are_strictly_ascending(families: list[str], expected: Expected) -> None:
    arguments = edited("engram_memory_capture", {"/payload/reconciliation/family_refs": families})
    check("engram_memory_capture", arguments, expected)


# --------------------------------------------------------------------------- instants and digests

INSTANT_POINTERS: Final = ("/payload/citations/0/observed_at", "/payload/retention/expires_at")


@pytest.mark.parametrize("pointer", INSTANT_POINTERS)
@pytest.mark.parametrize("bad", BAD_INSTANTS)
def test_non_canonical_instants_are_refused(pointer: str, bad: str) -> None:
    check("engram_memory_capture", edited("engram_memory_capture", {pointer: bad}), (SCHEMA, pointer))


@pytest.mark.parametrize("pointer", INSTANT_POINTERS)
@pytest.mark.parametrize(
    "good",
    ["2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z", "1000-01-01T00:00:00.000Z"],
)
def test_canonical_instants_are_accepted(pointer: str, good: str) -> None:
    check("engram_memory_capture", edited("engram_memory_capture", {pointer: good}), None)


@pytest.mark.parametrize("pointer", INSTANT_POINTERS)
@pytest.mark.parametrize("good", ["0999-12-31T23:59:59.999Z", "0001-01-01T00:00:00.000Z"])
def test_instants_before_year_1000_are_accepted(pointer: str, good: str) -> None:
    """Four-digit years below 1000 are canonical (ECMAScript toISOString writes them zero-padded)."""
    check("engram_memory_capture", edited("engram_memory_capture", {pointer: good}), None)


DIGEST_POINTERS: Final = ("/payload/citations/0/content_digest", "/evidence/evidence_digest")


@pytest.mark.parametrize("pointer", DIGEST_POINTERS)
@pytest.mark.parametrize("bad", BAD_DIGESTS)
def test_malformed_digests_are_invalid_digest(pointer: str, bad: str) -> None:
    check("engram_memory_capture", edited("engram_memory_capture", {pointer: bad}), (DIGEST, pointer))


@pytest.mark.parametrize("pointer", DIGEST_POINTERS)
@pytest.mark.parametrize("bad", [None, 7, ["sha256:" + "0" * 64], {"sha256": "0" * 64}, True])
def test_digest_of_the_wrong_type_is_invalid_schema(pointer: str, bad: Json) -> None:
    check("engram_memory_capture", edited("engram_memory_capture", {pointer: bad}), (SCHEMA, pointer))


def test_a_schema_error_wins_over_a_malformed_digest() -> None:
    edits = {"/evidence/evidence_digest": "sha256:XYZ", "/payload/citations/0/source_ref": ""}
    check("engram_memory_capture", edited("engram_memory_capture", edits), (SCHEMA, "/payload/citations/0/source_ref"))


# --------------------------------------------------------------------------- the 1 MiB cap


def compact(arguments: Json) -> bytes:
    """The compact JSON serialisation the 1 MiB cap measures: UTF-8, as given, not normalised."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def capture_of_size(target: int) -> dict[str, Json]:
    """A capture whose compact serialisation is exactly ``target`` bytes (ASCII padding text)."""
    args = capture_lists(citations=1, components=1, evidence=1, families=0)
    components = args["payload"]["components"]
    template = components[0]
    count = -(-(target - len(compact(args))) // 60_000)
    components += [{**template, "component_id": f"k{1 + i}", "text": "a"} for i in range(count)]
    missing = target - len(compact(args))
    for component in components[1:]:
        grow = min(missing, 65_535)
        component["text"] = "a" * (1 + grow)
        missing -= grow
    assert len(compact(args)) == target
    return args


def test_arguments_of_exactly_one_mib_are_accepted() -> None:
    check("engram_memory_capture", capture_of_size(ONE_MIB), None)


def test_arguments_over_one_mib_are_refused_at_the_root() -> None:
    check("engram_memory_capture", capture_of_size(ONE_MIB + 1), (SCHEMA, ""))


def test_the_cap_is_checked_before_the_fields() -> None:
    arguments = capture_of_size(ONE_MIB + 1)
    arguments["payload"]["components"][0]["kind"] = "Context"  # invalid, same size
    check("engram_memory_capture", arguments, (SCHEMA, ""))


DECOMPOSED: Final = "e\u0301"
"""3 UTF-8 bytes as sent; NFC makes it "\u00e9", 2 bytes."""


def test_typed_capture_applies_the_cap_like_call_tool() -> None:
    """The typed API refuses arguments one byte over the cap at the root, writes nothing, and takes the cap itself."""
    service = MemoryService(
        store=(store := InMemoryStore()),
        vault=InMemoryKeyVault(),
        policy=DefaultPolicy(max_retention=None),
        clock=ManualClock(),
    )
    at_cap = capture_of_size(ONE_MIB)
    binding = make_binding(purpose_ref=at_cap["payload"]["purpose_ref"])
    typed = parse_args(CaptureArgs, at_cap)
    over = attrs.evolve(typed, idempotency_key=typed.idempotency_key + "x")
    assert json.loads(compact({**at_cap, "idempotency_key": over.idempotency_key})) == unstructure_args(over)
    assert (
        service.call_tool("engram_memory_capture", unstructure_args(over), binding)["error"]["code"] == "INVALID_SCHEMA"
    )
    with pytest.raises(EngramError) as info:
        service.capture(binding, over)
    assert (info.value.code, info.value.pointer) == (SCHEMA, "")
    assert store.raw_partition(binding.scope).events == []
    assert service.capture(binding, typed).status == "committed_pending"


def test_a_record_captured_at_the_cap_is_too_large_to_read_whole() -> None:
    """contract.md "Packet budgets": the record adds ids and receipts to its payload, so a capture at
    the argument cap admits a record that get refuses even at the largest ``max_packet_bytes``."""
    service = MemoryService(
        store=InMemoryStore(),
        vault=InMemoryKeyVault(),
        policy=DefaultPolicy(admission="accept", max_retention=None),
        clock=ManualClock(),
    )
    at_cap = capture_of_size(ONE_MIB)
    del at_cap["payload"]["valid_time"]["t_end"]  # valid now, so readable but for its size
    at_cap["payload"]["components"][-1]["text"] += "a" * (ONE_MIB - len(compact(at_cap)))
    assert len(compact(at_cap)) == ONE_MIB
    binding = make_binding(purpose_ref=at_cap["payload"]["purpose_ref"])
    candidate_id = service.call_tool("engram_memory_capture", at_cap, binding)["output"]["value"]["candidate_id"]
    admission = {"candidate_id": candidate_id, "idempotency_key": "admit-the-mebibyte"}
    outcome = service.call_tool("engram_memory_request_admission", admission, binding)["output"]["value"]["outcome"]
    assert outcome["status"] == "accepted"
    read = {"record_id": outcome["record_id"], "purpose_ref": binding.purpose_ref, "max_packet_bytes": ONE_MIB}
    assert service.call_tool("engram_memory_get", read, binding)["error"]["code"] == "PROJECTION_OVERSIZED"


def test_every_input_schema_states_the_cap_as_it_is_measured() -> None:
    """The published rule says what the runtime measures: the compact JSON text as sent, and in NFC."""
    rule = (
        "The serialised arguments (their compact JSON text in UTF-8) are at most 1,048,576 bytes, both as "
        "sent and once their texts are in NFC."
    )
    for tool in ARGS_BY_TOOL:
        assert rule in input_schema(tool)["x-engram-rules"], tool


def test_the_cap_measures_the_arguments_as_sent_not_their_nfc_form() -> None:
    """1.47 MB of decomposed text is over the cap even though its NFC form is 0.98 MB."""
    arguments = capture_lists(citations=1, components=15, evidence=1, families=0)
    for component in arguments["payload"]["components"]:
        component["text"] = DECOMPOSED * 32_768  # NFC: 65,536 bytes, the component bound
    assert len(canonical_bytes(arguments)) <= ONE_MIB < len(compact(arguments))
    check("engram_memory_capture", arguments, (SCHEMA, ""))
    with pytest.raises(EngramError) as info:
        parse_json(compact(arguments))
    assert (info.value.code, info.value.pointer) == (SCHEMA, "")


@pytest.mark.parametrize(("size", "expected"), [(ONE_MIB, None), (ONE_MIB + 1, (SCHEMA, ""))])
def test_parse_args_and_parse_json_agree_on_the_cap(size: int, expected: Expected) -> None:
    """The same decomposed arguments, as an object and as their compact bytes, get one answer."""
    arguments = capture_of_size(size)
    component = arguments["payload"]["components"][1]
    component["text"] = DECOMPOSED * 1000 + component["text"][3000:]  # same bytes, fewer once NFC
    raw = compact(arguments)
    assert len(raw) == size
    check("engram_memory_capture", arguments, expected)
    if expected is None:
        check("engram_memory_capture", parse_json(raw), None)
    else:
        with pytest.raises(EngramError) as info:
            parse_json(raw)
        assert (info.value.code, info.value.pointer) == expected


# --------------------------------------------------------------------------- nesting and key types


def nested(depth: int) -> Json:
    """``depth`` arrays, one inside the other."""
    value: Json = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _schema_depth(schema: Json) -> int:
    if not isinstance(schema, dict):
        return 0
    children = [*schema.get("properties", {}).values(), schema.get("items")]
    return (schema.get("type") in ("object", "array")) + max(_schema_depth(child) for child in children)


@pytest.mark.parametrize("tool", list(ARGS_BY_TOOL))
def test_every_schema_nests_well_within_the_nesting_bound(tool: str) -> None:
    assert _schema_depth(input_schema(tool)) < MAX_NESTING


@pytest.mark.parametrize("pointer", ["/query", "/extra", "/capability_policy/extra"])
@pytest.mark.parametrize("depth", [MAX_NESTING, 600, sys.getrecursionlimit() * 2])
def test_nesting_beyond_the_bound_is_refused_at_the_root(pointer: str, depth: int) -> None:
    """Deep nesting is INVALID_SCHEMA at the root, never a RecursionError (the value counts as level 1)."""
    check("engram_memory_search", edited("engram_memory_search", {pointer: nested(depth)}), (SCHEMA, ""))


@pytest.mark.parametrize("pointer", ["/query", "/extra", "/capability_policy/extra"])
def test_nesting_within_the_bound_is_reported_at_the_field(pointer: str) -> None:
    depth = MAX_NESTING - pointer.count("/")  # the argument object itself is level 1
    check("engram_memory_search", edited("engram_memory_search", {pointer: nested(depth)}), (SCHEMA, pointer))


@pytest.mark.parametrize("key", [1, ("a", "b"), None])
@pytest.mark.parametrize("pointer", ["", "/capability_policy"])
def test_non_string_keys_are_refused_at_the_root(key: Json, pointer: str) -> None:
    """Only a Python caller can send them; they are INVALID_SCHEMA, not an AttributeError."""
    arguments = edited("engram_memory_search", {})
    node = arguments if not pointer else arguments[pointer[1:]]
    node[key] = "x"
    check("engram_memory_search", arguments, (SCHEMA, ""))


# --------------------------------------------------------------------------- parse_json


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"query": "a", "query": "b", "purpose_ref": "p"}', id="duplicate-key"),
        pytest.param('{"payload": {"x": 1, "x": 1}}', id="nested-duplicate-key"),
        pytest.param("NaN", id="nan"),
        pytest.param('{"limit": NaN}', id="nested-nan"),
        pytest.param('{"limit": Infinity}', id="infinity"),
        pytest.param('{"limit": -Infinity}', id="minus-infinity"),
        pytest.param("-0", id="minus-zero"),
        pytest.param('{"limit": -0}', id="nested-minus-zero"),
        pytest.param(b'{"query": "\xff"}', id="invalid-utf8"),
        pytest.param('{"query": ', id="truncated"),
        pytest.param("", id="empty"),
        pytest.param("\ud800", id="lone-surrogate-text"),
        pytest.param(b'"' + b"a" * ONE_MIB + b'"', id="over-one-mib"),
        pytest.param('{"limit": %s}' % ("9" * 5000), id="integer-over-the-digit-limit"),
        pytest.param("[" * 1000 + "]" * 1000, id="nested-past-the-recursion-limit"),
        pytest.param('{"query": %s}' % ("[" * MAX_NESTING + "]" * MAX_NESTING), id="nested-past-the-bound"),
    ],
)
def test_parse_json_refuses(raw: str | bytes) -> None:
    with pytest.raises(EngramError) as info:
        parse_json(raw)
    assert (info.value.code, info.value.pointer) == (SCHEMA, "")


def test_parse_json_accepts_exactly_one_mib() -> None:
    assert parse_json(b'"' + b"a" * (ONE_MIB - 2) + b'"') == "a" * (ONE_MIB - 2)


def test_parse_json_measures_the_cap_as_parse_args_does_not_the_raw_text() -> None:
    """Whitespace and ``\\u`` escapes do not count: the bound is on the compact UTF-8 text of the value.

    Both answers come from one rule, so a host that parses with ``parse_json`` (to catch duplicate
    keys) accepts what ``call_tool`` accepts. Raw text over 8 MiB is refused before it is parsed.
    """
    escaped = capture_of_size(ONE_MIB - 200_000)
    for component in escaped["payload"]["components"][1:]:  # the padding components (ASCII text)
        component["text"] = "\u00e9" * max(1, len(component["text"]) // 2)  # 2 UTF-8 bytes, 6 escaped
    ascii_raw = json.dumps(escaped).encode("ascii")  # ensure_ascii: every é sent as \u00e9
    assert len(compact(escaped)) <= ONE_MIB < len(ascii_raw) < MAX_RAW_JSON_BYTES
    assert parse_json(ascii_raw) == escaped
    check("engram_memory_capture", parse_json(ascii_raw), None)

    padded = b'{"query": "q",' + b" " * (2 * ONE_MIB) + b'"purpose_ref": "p"}'
    check("engram_memory_search", parse_json(padded), None)

    over = capture_of_size(ONE_MIB + 1)
    with pytest.raises(EngramError) as info:
        parse_json(json.dumps(over, indent=4))  # over the bound however it is laid out
    assert (info.value.code, info.value.pointer) == (SCHEMA, "")

    with pytest.raises(EngramError) as info:
        parse_json(b'{"query": "q",' + b" " * MAX_RAW_JSON_BYTES + b'"purpose_ref": "p"}')
    assert (info.value.code, info.value.pointer) == (SCHEMA, "")


def test_parse_json_then_parse_args() -> None:
    raw = '{"query": "cafe\\u0301", "purpose_ref": "p", "limit": 10.0}'
    typed = parse_args(SearchArgs, parse_json(raw))
    assert (typed.query, typed.limit) == ("caf\u00e9", 10)
    assert type(typed.limit) is int


@pytest.mark.parametrize(
    ("raw", "pointer"),
    [
        ('{"query": "q", "purpose_ref": "p", "limit": -0.0}', "/limit"),
        ('{"query": "\\ud800", "purpose_ref": "p"}', "/query"),
    ],
    ids=["minus-zero-float", "escaped-lone-surrogate"],
)
def test_values_json_cannot_rule_out_are_refused_by_the_parser(raw: str, pointer: str) -> None:
    check("engram_memory_search", parse_json(raw), (SCHEMA, pointer))


def test_parse_json_refuses_numbers_that_overflow_to_infinity() -> None:
    with pytest.raises(EngramError) as caught:
        parse_json('{"query": "q", "purpose_ref": "p", "limit": 1e400}')
    assert caught.value.code is ErrorCode.INVALID_SCHEMA
    assert caught.value.pointer == ""


# --------------------------------------------------------------------------- pointers, precedence, -0.0, depth 32


@pytest.mark.parametrize("pointer", ["/payload/valid_time/t", "/payload/valid_time/t_end", "/payload/primary_event/at"])
def test_negative_zero_is_refused_where_zero_is_allowed(pointer: str) -> None:
    """``-0.0`` is not the integer 0 even in a field that accepts 0 (so the range check cannot hide it)."""
    zeros = {"/payload/valid_time/t": 0, "/payload/valid_time/t_end": 0, "/payload/primary_event/at": 0}
    accepted = check("engram_memory_capture", edited("engram_memory_capture", zeros), None)
    assert (accepted.payload.valid_time.t, accepted.payload.primary_event.at) == (0, 0)
    check("engram_memory_capture", edited("engram_memory_capture", {**zeros, pointer: -0.0}), (SCHEMA, pointer))


def test_the_first_extra_key_in_sorted_order_is_reported() -> None:
    for keys in (("zz_b", "zz_a"), ("zz_a", "zz_b")):
        arguments = edited("engram_memory_search", {})
        for key in keys:
            arguments[key] = 1
        check("engram_memory_search", arguments, (SCHEMA, "/zz_a"))


@pytest.mark.parametrize(
    ("parent", "key", "pointer"),
    [
        ("", "a/b~c", "/a~1b~0c"),
        ("", "~1", "/~01"),
        ("/capability_policy", "x/~", "/capability_policy/x~1~0"),
    ],
)
def test_extra_keys_are_reported_as_escaped_json_pointers(parent: str, key: str, pointer: str) -> None:
    """RFC 6901: ``~`` is written ``~0`` and ``/`` is written ``~1`` (``~`` first, so ``~1`` stays two tokens)."""
    arguments = edited("engram_memory_search", {})
    node = arguments if not parent else arguments[parent[1:]]
    node[key] = "x"
    check("engram_memory_search", arguments, (SCHEMA, pointer))


def test_a_schema_error_after_a_malformed_digest_still_wins() -> None:
    """A malformed digest earlier in the same array does not hide a later schema error."""
    edits = {"/payload/citations/0/content_digest": "sha256:XYZ", "/payload/citations/1/source_ref": ""}
    check("engram_memory_capture", edited("engram_memory_capture", edits), (SCHEMA, "/payload/citations/1/source_ref"))
    digests_only = {"/payload/citations/0/content_digest": "sha256:XYZ", "/evidence/evidence_digest": "x"}
    check(
        "engram_memory_capture",
        edited("engram_memory_capture", digests_only),
        (DIGEST, "/payload/citations/0/content_digest"),
    )


@pytest.mark.parametrize(
    ("edits", "pointer"),
    [
        ({"/evidence/evidence_digest": "sha256:XYZ", "/evidence/citation_ids": []}, "/evidence/citation_ids"),
        ({"/evidence/evidence_digest": "x", "/evidence/attestation": "a" * 5_000}, "/evidence/attestation"),
        (
            {"/payload/citations/0/content_digest": "sha256:XYZ", "/payload/citations/0/observed_at": "2026-02-30"},
            "/payload/citations/0/observed_at",
        ),
        (
            {"/evidence/evidence_digest": "x", "/evidence/citation_ids": ["no-such-citation"]},
            "/evidence/citation_ids/0",
        ),
        (
            {"/payload/citations/0/content_digest": "sha256:XYZ", "/payload/citations/1/citation_id": "=0"},
            "/payload/citations/1/citation_id",
        ),
    ],
    ids=["empty-list-beside-it", "attestation-beside-it", "instant-beside-it", "evidence-rule", "duplicate-rule"],
)
def test_a_schema_error_in_the_same_object_as_a_malformed_digest_still_wins(
    edits: dict[str, Json], pointer: str
) -> None:
    """A class stops at its first failing validator and skips its rules; the digest must not hide them.

    ``"=0"`` stands for the first citation's id (a duplicate).
    """
    base = BASES["engram_memory_capture"]
    first_id = base["payload"]["citations"][0]["citation_id"]
    resolved = {key: first_id if value == "=0" else value for key, value in edits.items()}
    check("engram_memory_capture", edited("engram_memory_capture", resolved), (SCHEMA, pointer))
    digest_only = {key: value for key, value in resolved.items() if key.endswith("_digest")}
    digest_pointer = next(iter(digest_only))
    check("engram_memory_capture", edited("engram_memory_capture", digest_only), (DIGEST, digest_pointer))


@pytest.mark.parametrize(("depth", "expected"), [(31, (SCHEMA, "/query")), (32, (SCHEMA, ""))])
def test_nesting_is_bounded_at_32_levels(depth: int, expected: Expected) -> None:
    """The contract's bound, written out: the argument object is level 1, so 31 arrays under /query reach 32."""
    check("engram_memory_search", edited("engram_memory_search", {"/query": nested(depth)}), expected)
    raw = '{"query": ' + "[" * depth + "]" * depth + ', "purpose_ref": "p"}'
    if expected == (SCHEMA, ""):
        with pytest.raises(EngramError) as info:
            parse_json(raw)
        assert (info.value.code, info.value.pointer) == expected
    else:
        check("engram_memory_search", parse_json(raw), expected)


def test_typed_arguments_hold_the_same_array_bounds() -> None:
    """Arguments built in Python (no JSON converter) meet the bound in the field's validator, with the
    same pointer and detail."""
    with pytest.raises(EngramError) as refused:
        Component(component_id="k0", kind="context", text="text", citation_ids=tuple(f"c{i}" for i in range(257)))
    assert (refused.value.code, refused.value.pointer) == (SCHEMA, "/citation_ids")
    assert "list has 257 items, allowed at most 256" in refused.value.__notes__
    with pytest.raises(EngramError) as empty:
        Component(component_id="k0", kind="context", text="text", citation_ids=())
    assert (empty.value.code, empty.value.pointer) == (SCHEMA, "/citation_ids")
    assert "list has 0 items, allowed at least 1" in empty.value.__notes__
