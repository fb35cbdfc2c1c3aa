"""MCP-style tool descriptors: order, names, annotations, schemas, and independence of copies."""

from __future__ import annotations

import json
from typing import Any, Final

import jsonschema
import pytest

from engram_memory.errors import EngramError, ErrorCode
from engram_memory.wire import RequestAdmissionArgs, failure_envelope, parse_args, success_envelope, to_mcp_call_result
from engram_memory.wire.descriptors import tool_descriptors
from engram_memory.wire.schemas import input_schema, output_envelope_schema
from tests.wire_strategies import TOOLS, sample_output_value

ANNOTATIONS: Final = {
    "engram_memory_search": (True, False, True),
    "engram_memory_get": (True, False, True),
    "engram_memory_capture": (False, False, True),
    "engram_memory_request_admission": (False, False, True),
    "engram_memory_withdraw": (False, True, True),
    "engram_memory_forget": (False, True, True),
}
"""(readOnlyHint, destructiveHint, idempotentHint) per tool; openWorldHint is always false."""


def _by_name() -> dict[str, dict[str, Any]]:
    return {descriptor["name"]: descriptor for descriptor in tool_descriptors()}


def test_six_descriptors_in_contract_order() -> None:
    assert [descriptor["name"] for descriptor in tool_descriptors()] == list(TOOLS)


def test_descriptor_keys() -> None:
    for descriptor in tool_descriptors():
        assert set(descriptor) == {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}
        assert descriptor["title"]
        assert descriptor["title"] != descriptor["name"]


def test_titles_and_descriptions_tell_the_tools_apart() -> None:
    """An agent picks a tool by its title and description: no two tools may share either."""
    descriptors = tool_descriptors()
    assert len({descriptor["title"] for descriptor in descriptors}) == len(TOOLS)
    assert len({descriptor["description"] for descriptor in descriptors}) == len(TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_annotations_are_truthful(tool: str) -> None:
    read_only, destructive, idempotent = ANNOTATIONS[tool]
    assert _by_name()[tool]["annotations"] == {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
    }


@pytest.mark.parametrize("tool", TOOLS)
def test_input_schema_is_the_published_one(tool: str) -> None:
    assert _by_name()[tool]["inputSchema"] == input_schema(tool)


@pytest.mark.parametrize("tool", TOOLS)
def test_output_schema_is_the_envelope_schema(tool: str) -> None:
    schema = _by_name()[tool]["outputSchema"]
    assert schema == output_envelope_schema(tool)
    assert schema["type"] == "object"  # MCP requires an object schema at the root


@pytest.mark.parametrize("tool", TOOLS)
def test_output_schema_validates_a_success_envelope(tool: str) -> None:
    validator = jsonschema.Draft202012Validator(_by_name()[tool]["outputSchema"])
    envelope = success_envelope(sample_output_value(tool), "audit-1")
    validator.validate(envelope)
    carried = to_mcp_call_result(envelope)
    validator.validate(json.loads(carried["content"][0]["text"]))
    other = next(name for name in TOOLS if name != tool)
    assert not validator.is_valid(success_envelope(sample_output_value(other), "audit-1"))


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("code", list(ErrorCode))
def test_output_schema_validates_every_failure_envelope(tool: str, code: ErrorCode) -> None:
    validator = jsonschema.Draft202012Validator(_by_name()[tool]["outputSchema"])
    envelope = failure_envelope(EngramError(code, pointer="/x", detail="secret detail"), "audit-1")
    validator.validate(envelope)
    assert "secret detail" not in json.dumps(envelope)


@pytest.mark.parametrize("tool", TOOLS)
def test_description_guides_the_agent(tool: str) -> None:
    description = _by_name()[tool]["description"]
    sentences = [part for part in description.split(". ") if part.strip()]
    assert 3 <= len(sentences) <= 6, sentences
    assert "NOT_FOUND" in description or "INVALID_SCHEMA" in description or "STALE_PAGE" in description


def test_capture_description_carries_the_discipline() -> None:
    description = _by_name()["engram_memory_capture"]["description"]
    phrases = ("Search first", "pending", "encrypted", "cite", "request_admission")
    never_stored = ("secret", "credential", "token", "signing key", "password", "connection string", ".env", "cookie")
    for phrase in (*phrases, *never_stored):  # founding document §1 and §4
        assert phrase in description, phrase


@pytest.mark.parametrize("tool", ["engram_memory_withdraw", "engram_memory_forget"])
def test_destructive_descriptions_mention_confirmation(tool: str) -> None:
    description = _by_name()[tool]["description"]
    assert "confirmation" in description
    assert "gate_failed" in description


def test_descriptors_are_json_serialisable() -> None:
    descriptors = tool_descriptors()
    assert json.loads(json.dumps(descriptors, allow_nan=False)) == descriptors


def test_mutating_a_descriptor_does_not_affect_the_next_call() -> None:
    first = tool_descriptors()
    first[0]["annotations"]["readOnlyHint"] = False
    first[0]["inputSchema"]["properties"].clear()
    first[0]["outputSchema"]["oneOf"].clear()
    first[0]["description"] = "changed"
    first.clear()
    second = tool_descriptors()
    assert second[0]["annotations"]["readOnlyHint"] is True
    assert second[0]["inputSchema"] == input_schema("engram_memory_search")
    assert second[0]["outputSchema"] == output_envelope_schema("engram_memory_search")
    assert second[0]["description"] != "changed"


def test_selection_keeps_contract_order() -> None:
    selected = tool_descriptors(["engram_memory_forget", "engram_memory_search", "engram_memory_forget"])
    assert [descriptor["name"] for descriptor in selected] == ["engram_memory_search", "engram_memory_forget"]
    assert tool_descriptors([]) == []
    assert [d["name"] for d in tool_descriptors(iter(["engram_memory_get"]))] == ["engram_memory_get"]


@pytest.mark.parametrize("tools", [["engram_memory_admin"], ["engram_memory_get", "search"], ["ENGRAM_MEMORY_GET"]])
def test_unknown_tool_is_a_key_error(tools: list[str]) -> None:
    with pytest.raises(KeyError):
        tool_descriptors(tools)


def test_a_single_string_is_refused() -> None:
    with pytest.raises(TypeError):
        tool_descriptors("engram_memory_get")


MUTATIONS: Final = (
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
)


@pytest.mark.parametrize("tool", MUTATIONS)
def test_the_idempotency_key_text_states_the_byte_bound_the_runtime_applies(tool: str) -> None:
    """The bound is in UTF-8 bytes: 4 emoji (16 bytes) pass, so the text must not ask for 16 characters."""
    description = _by_name()[tool]["inputSchema"]["properties"]["idempotency_key"]["description"]
    assert "an NFC string of 16-256 UTF-8 bytes (at least 16 ASCII characters, or fewer multi-byte ones)" in description
    for key, passes in (
        ("\U0001f600" * 4, True),
        ("é" * 8, True),
        ("k" * 16, True),
        ("k" * 15, False),
        ("é" * 7, False),
    ):
        args = {"candidate_id": "candidate_x", "idempotency_key": key}
        if passes:
            assert parse_args(RequestAdmissionArgs, args).idempotency_key == key
        else:
            with pytest.raises(EngramError) as refused:
                parse_args(RequestAdmissionArgs, args)
            assert refused.value.pointer == "/idempotency_key"
