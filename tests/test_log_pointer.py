"""The pointer of a refused argument in a log line: walked through the tool's schema, never quoting agent keys."""

from __future__ import annotations

import logging

import attrs
import pytest

from engram_memory import ManualClock, connect
from engram_memory.context import CAPTURE, SEARCH
from engram_memory.wire.log_pointer import loggable_pointer
from tests.read_fixtures import DocSpec, capture_args, make_binding

CAPTURE_TOOL = "engram_memory_capture"


@pytest.mark.parametrize(
    ("pointer", "logged"),
    [
        (None, "-"),
        ("", "/"),
        ("/idempotency_key", "/idempotency_key"),
        ("/482913", "/*"),  # a key of digits where an object is expected is agent text, not an index
        ("/payload/424242", "/payload/*"),
        ("/payload/components/0/text", "/payload/components/0/text"),
        ("/payload/components/63/text", "/payload/components/63/text"),
        ("/payload/components/00/text", "/payload/components/*/*"),  # not how a pointer writes an index
        ("/payload/components/1234567", "/payload/components/*"),
        ("/payload/components/0/secret word/0", "/payload/components/0/*/*"),
        ("/payload/extra/text", "/payload/*/*"),  # a schema name below an extra key is agent text too
        ("/payload/citations/0/locator/value", "/payload/citations/0/locator/value"),
        ("/idempotency_key/0", "/idempotency_key/*"),  # a string has no members
    ],
)
def test_a_segment_is_logged_only_where_the_capture_schema_has_it(pointer: str | None, logged: str) -> None:
    assert loggable_pointer(pointer, CAPTURE_TOOL) == logged


def test_a_tool_without_a_schema_logs_every_segment_as_a_star() -> None:
    assert loggable_pointer("/query/0", "engram_memory_unknown") == "/*/*"


def test_the_same_segment_is_logged_for_one_tool_and_starred_for_another() -> None:
    assert loggable_pointer("/query", "engram_memory_search") == "/query"
    assert loggable_pointer("/query", CAPTURE_TOOL) == "/*"


def test_a_digit_key_written_by_the_agent_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="engram_memory")
    service = connect("memory:", clock=ManualClock(), audit_ids=lambda: "audit-digits-0001")
    binding = make_binding()
    search = {"query": "orbit", "purpose_ref": binding.purpose_ref, "482913": "x"}
    capture = capture_args(DocSpec(key="digits", primary="a digit key"))
    capture["payload"]["424242"] = "y"
    for tool, arguments in ((SEARCH, search), (CAPTURE, capture)):
        envelope = service.call_tool(tool, arguments, attrs.evolve(binding))
        assert envelope["error"]["code"] == "INVALID_SCHEMA"
    messages = [record.getMessage() for record in caplog.records if record.name == "engram_memory"]
    assert messages == [
        "engram_memory_search answered INVALID_SCHEMA at /* (auditId audit-digits-0001)",
        "engram_memory_capture answered INVALID_SCHEMA at /payload/* (auditId audit-digits-0001)",
    ]
    assert not any("482913" in text or "424242" in text for text in messages)
