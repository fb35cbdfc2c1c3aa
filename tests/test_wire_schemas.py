"""The published JSON Schemas: well-formed, closed, in lockstep with the typed arguments and the parser."""

from __future__ import annotations

import math
import re
import types
import typing
import unicodedata
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import cache
from typing import Any, Final, Literal

import attrs
import jsonschema
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from engram_memory.canonical import CanonicalError, canonical_bytes
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.wire import ARGS_BY_TOOL, TOOL_NAMES, make_converter, parse_args
from engram_memory.wire import schemas as s
from tests.wire_strategies import (
    COMPOSES_3_TO_2,
    TOOLS,
    near_valid_arguments,
    sample_output_value,
    valid_arguments,
)

Json = Any
Validator = Any

# --------------------------------------------------------------------------- the strict validator


def _utf8_bytes(validator: Validator, bounds: Mapping[str, int], instance: Json, schema: Json) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    text = unicodedata.normalize("NFC", instance) if schema.get(s.X_NFC) == "normalise" else instance
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        yield jsonschema.ValidationError("lone surrogate")
        return
    if not bounds["min"] <= size <= bounds["max"]:
        yield jsonschema.ValidationError(f"{size} UTF-8 bytes, allowed {bounds['min']}..{bounds['max']}")


def _nfc(validator: Validator, mode: str, instance: Json, schema: Json) -> Iterator[Any]:
    if (
        mode == "required"
        and validator.is_type(instance, "string")
        and unicodedata.normalize("NFC", instance) != instance
    ):
        yield jsonschema.ValidationError("string is not NFC")


_INSTANT_RE: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z", re.ASCII)


def _is_real_instant(text: str) -> bool:
    match = _INSTANT_RE.fullmatch(text)
    if match is None:
        return False
    year, month, day, hour, minute, second, millis = (int(part) for part in match.groups())
    try:
        datetime(year, month, day, hour, minute, second, millis * 1000)  # noqa: DTZ001 - UTC by contract
    except ValueError:
        return False
    return True


def _engram_format(validator: Validator, fmt: str, instance: Json, schema: Json) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    if fmt == "instant" and not _is_real_instant(instance):
        yield jsonschema.ValidationError("not a real canonical instant")
    if fmt == "cursor" and instance.isascii() and instance.isdigit() and int(instance) > 2**64 - 1:
        yield jsonschema.ValidationError("cursor beyond 2**64 - 1")


def _max_argument_bytes(validator: Validator, limit: int, instance: Json, schema: Json) -> Iterator[Any]:
    try:
        size = len(canonical_bytes(instance))
    except CanonicalError:
        return
    if size > limit:
        yield jsonschema.ValidationError(f"serialised arguments are {size} bytes")


@cache
def _ecma(pattern: str) -> re.Pattern[str]:
    # ECMA-262, the dialect of JSON Schema: `$` only at the very end, `\d` only ASCII digits.
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern), re.ASCII)


def _pattern(validator: Validator, pattern: str, instance: Json, schema: Json) -> Iterator[Any]:
    if validator.is_type(instance, "string") and _ecma(pattern).search(instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


StrictValidator: Final = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {
        s.X_UTF8_BYTES: _utf8_bytes,
        s.X_NFC: _nfc,
        s.X_ENGRAM_FORMAT: _engram_format,
        s.X_MAX_ARGUMENT_BYTES: _max_argument_bytes,
        "pattern": _pattern,
    },
)
_STRICT: Final = {tool: StrictValidator(s.input_schema(tool)) for tool in TOOL_NAMES}


def _parser_accepts(tool: str, arguments: Json) -> bool:
    try:
        parse_args(ARGS_BY_TOOL[tool], arguments)
    except EngramError as exc:
        code = exc.code
    else:
        return True
    assert code in {ErrorCode.INVALID_SCHEMA, ErrorCode.INVALID_DIGEST}
    return False


# --------------------------------------------------------------------------- schema walking


def _all_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for tool in TOOL_NAMES:
        yield f"input:{tool}", s.input_schema(tool)
        yield f"output:{tool}", s.output_schema(tool)
        yield f"envelope:{tool}", s.output_envelope_schema(tool)


ALL_SCHEMAS: Final = dict(_all_schemas())

_NON_SCHEMA_KEYS: Final = frozenset({"default", "const", "enum", "required", s.X_UTF8_BYTES, s.X_ENGRAM_RULES})


def _subschemas(schema: Json, pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema object inside ``schema`` (values of keywords that hold data are skipped)."""
    if not isinstance(schema, dict):
        return
    yield pointer, schema
    for key, value in schema.items():
        if key in _NON_SCHEMA_KEYS:
            continue
        if key == "properties":
            for name, sub in value.items():
                yield from _subschemas(sub, f"{pointer}/properties/{name}")
        elif isinstance(value, dict):
            yield from _subschemas(value, f"{pointer}/{key}")
        elif isinstance(value, list):
            for index, sub in enumerate(value):
                yield from _subschemas(sub, f"{pointer}/{key}/{index}")


def _is_object_node(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in schema


# --------------------------------------------------------------------------- well-formedness


def test_every_tool_has_every_schema_in_contract_order() -> None:
    assert TOOL_NAMES == TOOLS
    for mapping in (s.INPUT_SCHEMAS, s.OUTPUT_SCHEMAS, s.ENVELOPE_SCHEMAS):
        assert tuple(mapping) == TOOLS
        assert len(mapping) == len(TOOLS)


@pytest.mark.parametrize("name", list(ALL_SCHEMAS))
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = ALL_SCHEMAS[name]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", list(ALL_SCHEMAS))
def test_every_object_node_is_closed(name: str) -> None:
    objects = [(pointer, node) for pointer, node in _subschemas(ALL_SCHEMAS[name]) if _is_object_node(node)]
    assert objects
    for pointer, node in objects:
        assert node.get("additionalProperties") is False, pointer
        assert set(node.get("required", [])) <= set(node["properties"]), pointer


@pytest.mark.parametrize("name", list(ALL_SCHEMAS))
def test_only_roots_declare_a_dialect(name: str) -> None:
    nested = [pointer for pointer, node in _subschemas(ALL_SCHEMAS[name]) if pointer and "$schema" in node]
    assert nested == []


def _string_nodes(tool: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for pointer, node in _subschemas(s.input_schema(tool)):
        if node.get("type") == "string":
            yield pointer, node


@pytest.mark.parametrize("tool", TOOLS)
def test_every_input_string_is_bounded(tool: str) -> None:
    """Every input string is an enum, a constant, a pattern or byte-bounded with a necessary maxLength."""
    for pointer, node in _string_nodes(tool):
        if "enum" in node or "const" in node or "pattern" in node:
            continue
        bounds = node[s.X_UTF8_BYTES]
        assert node.get("minLength", 0) == math.ceil(bounds["min"] / 4), pointer
        if node.get(s.X_NFC) == "normalise":
            assert node["maxLength"] == math.floor(bounds["max"] * 1.5), pointer
        else:
            assert node["maxLength"] == bounds["max"], pointer


@pytest.mark.parametrize("tool", TOOLS)
def test_byte_bounded_strings_declare_their_nfc_handling(tool: str) -> None:
    normalised = {"query", "text", "attestation"}
    verbatim = {"candidate_id", "page_cursor", "record_id"}
    for pointer, node in _string_nodes(tool):
        if s.X_UTF8_BYTES not in node:
            continue
        segments = pointer.split("/")
        name = segments[-2] if segments[-1] == "items" else segments[-1]
        if name in normalised:
            assert node[s.X_NFC] == "normalise", pointer
        elif name in verbatim:
            assert s.X_NFC not in node, pointer
        else:
            assert node[s.X_NFC] == "required", pointer


def test_integer_bounds_and_patterns_follow_the_contract() -> None:
    search = s.input_schema("engram_memory_search")["properties"]
    assert (search["limit"]["minimum"], search["limit"]["maximum"], search["limit"]["default"]) == (1, 50, 10)
    packet = search["max_packet_bytes"]
    assert (packet["minimum"], packet["maximum"], packet["default"]) == (4096, 1_048_576, 65_536)
    payload = s.input_schema("engram_memory_capture")["properties"]["payload"]["properties"]
    for node in (payload["valid_time"]["properties"]["t"], payload["primary_event"]["properties"]["at"]):
        assert (node["minimum"], node["maximum"]) == (-9007199254740991, 9007199254740991)
    citation = payload["citations"]["items"]["properties"]
    assert citation["content_digest"]["pattern"] == r"^sha256:[0-9a-f]{64}$"
    assert citation["observed_at"]["pattern"] == r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
    assert s.input_schema("engram_memory_get")["properties"]["record_id"]["pattern"] == r"^mem_[a-z2-7]+$"
    assert s.input_schema("engram_memory_capture")[s.X_MAX_ARGUMENT_BYTES] == 1_048_576


def test_rules_beyond_json_schema_are_annotated() -> None:
    capture = s.input_schema("engram_memory_capture")
    payload = capture["properties"]["payload"]
    assert len(payload[s.X_ENGRAM_RULES]) == 5
    assert any("evidence" in rule for rule in capture[s.X_ENGRAM_RULES])
    family_refs = payload["properties"]["reconciliation"]["properties"]["family_refs"]
    assert any("strictly ascending" in rule for rule in family_refs[s.X_ENGRAM_RULES])
    assert payload["properties"]["valid_time"][s.X_ENGRAM_RULES]


# --------------------------------------------------------------------------- lockstep with args.py

_CONVERTER: Final = make_converter()


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = (arg for arg in typing.get_args(tp) if arg is not type(None))
        return inner
    return tp


def _compare_class(cls: type, schema: dict[str, Any], pointer: str) -> None:
    fields = attrs.fields(cls)
    hints = typing.get_type_hints(cls)
    assert schema["type"] == "object", pointer
    assert list(schema["properties"]) == [f.name for f in fields], pointer
    assert set(schema["required"]) == {f.name for f in fields if f.default is attrs.NOTHING}, pointer
    for field in fields:
        sub = schema["properties"][field.name]
        where = f"{pointer}/{field.name}"
        _compare_default(field, sub, where)
        _compare_type(_strip_optional(hints[field.name]), sub, where)


def _compare_default(field: attrs.Attribute[Any], sub: dict[str, Any], where: str) -> None:
    default = field.default
    if default is attrs.NOTHING or default is None:
        assert "default" not in sub, where
        return
    factory = isinstance(default, attrs.Factory)  # type: ignore[arg-type]
    expected = _CONVERTER.unstructure(default.factory()) if factory else default
    assert sub["default"] == expected, where


def _compare_type(tp: Any, sub: dict[str, Any], where: str) -> None:
    if attrs.has(tp):
        _compare_class(tp, sub, where)
    elif typing.get_origin(tp) is tuple:
        (item, _) = typing.get_args(tp)
        assert sub["type"] == "array", where
        _compare_type(item, sub["items"], f"{where}/items")
    elif typing.get_origin(tp) is Literal:
        options = list(typing.get_args(tp))
        assert sub.get("enum", [sub.get("const")]) == options, where
    elif tp is int:
        assert sub["type"] == "integer", where
    else:
        assert tp is str, where
        assert sub["type"] == "string", where


@pytest.mark.parametrize("tool", TOOLS)
def test_input_schema_mirrors_the_typed_arguments(tool: str) -> None:
    """Property names, required sets, enums, nesting and defaults equal the attrs classes."""
    _compare_class(ARGS_BY_TOOL[tool], s.input_schema(tool), tool)


# --------------------------------------------------------------------------- output schemas


@pytest.mark.parametrize("tool", TOOLS)
def test_sample_output_values_validate(tool: str) -> None:
    jsonschema.Draft202012Validator(s.output_schema(tool)).validate(sample_output_value(tool))
    StrictValidator(s.output_schema(tool)).validate(sample_output_value(tool))


def _object_paths(value: Json, pointer: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        yield pointer
        for key, item in value.items():
            yield from _object_paths(item, (*pointer, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _object_paths(item, (*pointer, index))


@pytest.mark.parametrize("tool", TOOLS)
def test_output_values_are_closed_at_every_level(tool: str) -> None:
    validator = jsonschema.Draft202012Validator(s.output_schema(tool))
    sample = sample_output_value(tool)
    for path in _object_paths(sample):
        mutated = sample_output_value(tool)
        node: Any = mutated
        for segment in path:
            node = node[segment]
        node["unexpected"] = 1
        assert not validator.is_valid(mutated), path


@pytest.mark.parametrize("tool", TOOLS)
def test_output_required_fields_are_required(tool: str) -> None:
    validator = jsonschema.Draft202012Validator(s.output_schema(tool))
    optional = {"record_digest", "record_id", "coverage_receipt_digest", "next_page_cursor"}
    sample = sample_output_value(tool)
    for key in sample:
        mutated = dict(sample)
        del mutated[key]
        assert validator.is_valid(mutated) == (key in optional), key


def test_redaction_keeps_only_record_id_mandatory() -> None:
    validator = jsonschema.Draft202012Validator(s.output_schema("engram_memory_get"))
    value = sample_output_value("engram_memory_get")
    value["record"] = {"record_id": "mem_abc"}
    assert validator.is_valid(value)
    value["record"] = {"purpose_ref": "p"}
    assert not validator.is_valid(value)


@pytest.mark.parametrize(
    ("tool", "path", "bad"),
    [
        ("engram_memory_capture", ("status",), "accepted"),
        ("engram_memory_capture", ("cursor",), "01"),
        ("engram_memory_capture", ("record_digest",), "sha256:" + "A" * 64),
        ("engram_memory_request_admission", ("outcome", "status"), "committed_pending"),
        ("engram_memory_request_admission", ("outcome", "record_id"), "rec_1"),
        ("engram_memory_request_admission", ("replayed",), "false"),
        ("engram_memory_withdraw", ("receipt", "to_state"), "tombstoned"),
        ("engram_memory_withdraw", ("key_destruction",), "scheduled"),
        ("engram_memory_forget", ("receipt", "from_state"), "pending"),
        ("engram_memory_forget", ("receipt", "operation"), "withdraw"),
        ("engram_memory_search", ("records", 0, "rank"), 0),
        ("engram_memory_search", ("records", 0, "redacted_fields"), ["/a", "/a"]),
        ("engram_memory_search", ("rank_receipt", "issued_at"), "2026-01-01T00:00:00Z"),
        ("engram_memory_search", ("rank_receipt", "candidate_count"), -1),
        ("engram_memory_get", ("read_receipt", "checked_at"), "2026-01-01"),
        ("engram_memory_search", ("records", 0, "record", "trust", "class"), "verified"),
    ],
)
def test_output_values_reject_out_of_contract_values(tool: str, path: tuple[str | int, ...], bad: Json) -> None:
    value = sample_output_value(tool)
    node: Any = value
    for segment in path[:-1]:
        node = node[segment]
    node[path[-1]] = bad
    assert not jsonschema.Draft202012Validator(s.output_schema(tool)).is_valid(value)


@pytest.mark.parametrize("tool", TOOLS)
def test_envelope_schema_accepts_both_branches_only(tool: str) -> None:
    validator = jsonschema.Draft202012Validator(s.output_envelope_schema(tool))
    success: dict[str, Any] = {
        "ok": True,
        "output": {"schema_version": 1, "value": sample_output_value(tool)},
        "auditId": "audit-1",
        "redactionClass": "high",
    }
    failure: dict[str, Any] = {
        "ok": False,
        "auditId": "audit-1",
        "redactionClass": "high",
        "error": {"code": "gate_failed", "message": "m", "retriable": False},
    }
    assert validator.is_valid(success)
    assert validator.is_valid(failure)
    assert not validator.is_valid({**success, "ok": False})
    assert not validator.is_valid({**failure, "ok": True})
    assert not validator.is_valid({**success, "error": failure["error"]})
    assert not validator.is_valid({**success, "output": {"schema_version": 2, "value": sample_output_value(tool)}})
    assert not validator.is_valid({**failure, "redactionClass": "low"})
    assert not validator.is_valid({**failure, "error": {**failure["error"], "code": "gate_Failed"}})
    assert not validator.is_valid({**failure, "extra": 1})


def test_envelope_error_codes_are_every_error_code() -> None:
    schema = s.output_envelope_schema("engram_memory_get")
    failure = schema["oneOf"][1]
    assert failure["properties"]["error"]["properties"]["code"]["enum"] == [code.value for code in ErrorCode]


# --------------------------------------------------------------------------- copies, not shared state


def test_schema_accessors_return_independent_copies() -> None:
    for getter in (s.input_schema, s.output_schema, s.output_envelope_schema):
        first = getter("engram_memory_search")
        first["properties"].clear()
        first["title"] = "changed"
        assert getter("engram_memory_search") != first
    s.INPUT_SCHEMAS["engram_memory_get"]["properties"].clear()
    assert s.INPUT_SCHEMAS["engram_memory_get"]["properties"]
    assert s.input_schema("engram_memory_get")["properties"]


def test_the_schema_mappings_answer_membership_and_name_their_tools() -> None:
    for mapping in (s.INPUT_SCHEMAS, s.OUTPUT_SCHEMAS, s.ENVELOPE_SCHEMAS):
        assert all(tool in mapping for tool in TOOLS)
        not_a_name: object = 7
        assert "engram_memory_admin" not in mapping
        assert not_a_name not in mapping
        assert repr(mapping) == f"<schemas of {', '.join(TOOLS)}>"


@pytest.mark.parametrize("getter", [s.input_schema, s.output_schema, s.output_envelope_schema])
def test_unknown_tool_is_a_key_error(getter: Any) -> None:
    with pytest.raises(KeyError):
        getter("engram_memory_admin")


# --------------------------------------------------------------------------- schema <=> parser


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("engram_memory_search", {"query": COMPOSES_3_TO_2 * 4096, "purpose_ref": "p"}),
        ("engram_memory_search", {"query": "\u20ac" * 2730 + "aa", "purpose_ref": "p"}),
        ("engram_memory_request_admission", {"candidate_id": "c", "idempotency_key": "\U0001f600" * 4}),
    ],
    ids=["nfd-query-1.5-chars-per-byte", "query-8192-bytes-2732-chars", "key-16-bytes-4-chars"],
)
def test_character_bounds_are_necessary_conditions(tool: str, arguments: dict[str, Any]) -> None:
    """Inputs at the byte bound with few bytes per character pass the plain validator and the parser."""
    assert jsonschema.Draft202012Validator(s.input_schema(tool)).is_valid(arguments)
    assert _parser_accepts(tool, arguments)


@pytest.mark.parametrize("tool", TOOLS)
@settings(max_examples=40)
@given(data=st.data())
def test_valid_arguments_pass_schema_and_parser(tool: str, data: st.DataObject) -> None:
    arguments = data.draw(valid_arguments(tool))
    assert _STRICT[tool].is_valid(arguments), list(_STRICT[tool].iter_errors(arguments))[:1]
    assert _parser_accepts(tool, arguments)


@pytest.mark.parametrize("tool", TOOLS)
@settings(max_examples=200)
@given(data=st.data())
def test_schema_agrees_with_parser(tool: str, data: st.DataObject) -> None:
    """The strict validator (schema + vendor keywords) accepts exactly what the parser accepts."""
    arguments, label = data.draw(near_valid_arguments(tool))
    event(label)
    schema_ok = _STRICT[tool].is_valid(arguments)
    assert schema_ok == _parser_accepts(tool, arguments), (label, list(_STRICT[tool].iter_errors(arguments))[:1])


# --------------------------------------------------------------------------- output bounds of the contract, written out


def _output_valid(tool: str, value: Json) -> bool:
    """Whether the plain and the strict validator both accept ``value`` (they must agree)."""
    plain = bool(jsonschema.Draft202012Validator(s.output_schema(tool)).is_valid(value))
    assert bool(StrictValidator(s.output_schema(tool)).is_valid(value)) is plain
    return plain


def valid_capture_arguments() -> dict[str, Json]:
    """A small, valid capture argument object."""
    digest = "sha256:" + "0" * 64
    return {
        "idempotency_key": "idempotency-key-0001",
        "payload": {
            "schema_version": 2,
            "purpose_ref": "purpose-1",
            "valid_time": {"t": 1000},
            "components": [{"component_id": "k1", "kind": "decision", "text": "Use WAL.", "citation_ids": ["c1"]}],
            "primary_component_id": "k1",
            "primary_event": {"at": 1000, "type_ref": "decided", "citation_id": "c1"},
            "citations": [
                {
                    "citation_id": "c1",
                    "source_ref": "adr-7",
                    "locator": {"scheme": "line", "value": "3"},
                    "content_digest": digest,
                }
            ],
        },
        "evidence": {"evidence_ref": "ev-1", "evidence_digest": digest, "citation_ids": ["c1"]},
    }


@pytest.mark.parametrize(
    ("cursor", "valid"),
    [("0", True), ("18446744073709551615", True), ("1" * 21, False), ("018446744073709551615", False)],
)
def test_output_cursors_reach_the_largest_64_bit_cursor(cursor: str, valid: bool) -> None:
    value = sample_output_value("engram_memory_capture")
    value["cursor"] = cursor
    assert _output_valid("engram_memory_capture", value) is valid
    receipt = sample_output_value("engram_memory_get")
    receipt["read_receipt"]["validated_through_cursor"] = cursor
    assert _output_valid("engram_memory_get", receipt) is valid


@pytest.mark.parametrize(("count", "valid"), [(0, True), (50, True), (51, False)])
def test_a_search_page_holds_at_most_50_records(count: int, valid: bool) -> None:
    value = sample_output_value("engram_memory_search")
    packet = value["records"][0]
    value["records"] = [{**packet, "rank": rank} for rank in range(1, count + 1)]
    value["rank_receipt"]["candidate_count"] = count
    assert _output_valid("engram_memory_search", value) is valid


def test_an_empty_search_has_zero_candidates() -> None:
    value = sample_output_value("engram_memory_search")
    value["records"] = []
    value["rank_receipt"]["candidate_count"] = 0
    value["rank_receipt"]["projection_receipt_digests"] = []
    del value["next_page_cursor"]
    assert _output_valid("engram_memory_search", value)


@pytest.mark.parametrize(
    ("from_state", "valid"),
    [
        ("accepted_current", True),
        ("accepted_disputed", True),
        ("historical", True),
        ("expired", True),
        ("trust_invalid", True),
        ("pending", False),
        ("withdrawn", False),
        ("tombstoned", False),
    ],
)
def test_forget_reports_every_state_it_can_leave(from_state: str, valid: bool) -> None:
    """Founding document §forget: from_state is one of accepted_current | accepted_disputed | historical | expired
    | trust_invalid."""
    value = sample_output_value("engram_memory_forget")
    value["receipt"]["from_state"] = from_state
    assert _output_valid("engram_memory_forget", value) is valid


@pytest.mark.parametrize(("from_state", "valid"), [("pending", True), ("accepted_current", False), ("", False)])
def test_withdraw_only_leaves_pending(from_state: str, valid: bool) -> None:
    value = sample_output_value("engram_memory_withdraw")
    value["receipt"]["from_state"] = from_state
    assert _output_valid("engram_memory_withdraw", value) is valid


@pytest.mark.parametrize(
    ("pointer", "valid"),
    [
        ("/citations", True),
        ("/a~1b", True),
        ("/t~0", True),
        ("/~01", True),
        ("citations", False),
        ("", False),
        ("/a~2", False),
        ("/a~", False),
        ("/a~b", False),
    ],
)
def test_redacted_fields_are_escaped_json_pointers(pointer: str, valid: bool) -> None:
    for tool in ("engram_memory_get", "engram_memory_search"):
        value = sample_output_value(tool)
        packet = value if tool == "engram_memory_get" else value["records"][0]
        packet["redacted_fields"] = [pointer]
        assert _output_valid(tool, value) is valid, tool


@pytest.mark.parametrize("status", ["rejected", "pending_adjudication"])
def test_an_outcome_without_a_record_has_no_record_id(status: str) -> None:
    value = sample_output_value("engram_memory_request_admission")
    value["outcome"]["status"] = status
    del value["outcome"]["record_id"]
    assert _output_valid("engram_memory_request_admission", value)


@pytest.mark.parametrize(("size", "valid"), [(0, True), (4096, True), (4097, False)])
def test_the_attestation_schema_bounds_4096_bytes(size: int, valid: bool) -> None:
    """Free text: the plain schema's maxLength is only necessary (6,144); the byte bound is exact."""
    arguments = valid_capture_arguments()
    arguments["evidence"]["attestation"] = "a" * size
    assert jsonschema.Draft202012Validator(s.input_schema("engram_memory_capture")).is_valid(arguments)
    assert _STRICT["engram_memory_capture"].is_valid(arguments) is valid
    assert _parser_accepts("engram_memory_capture", arguments) is valid


@pytest.mark.parametrize(("families", "valid"), [(["fam-a", "fam-b"], True), (["fam-a", "fam-a"], False)])
def test_the_family_refs_schema_refuses_duplicates(families: list[str], valid: bool) -> None:
    arguments = valid_capture_arguments()
    arguments["payload"]["reconciliation"] = {"family_refs": families}
    assert jsonschema.Draft202012Validator(s.input_schema("engram_memory_capture")).is_valid(arguments) is valid
    assert _parser_accepts("engram_memory_capture", arguments) is valid
