"""The wire layer: closed schemas, strict parsing and the envelope.

The only place that knows JSON shapes. Tool names (``engram_memory_*``) appear here and in the
optional MCP adapter only.
"""

from engram_memory.wire.args import (
    CaptureArgs,
    Citation,
    Component,
    Evidence,
    ForgetArgs,
    GetArgs,
    Locator,
    Payload,
    PrimaryEvent,
    Reconciliation,
    RequestAdmissionArgs,
    Retention,
    SearchArgs,
    SearchCapabilityPolicy,
    ValidTime,
    WithdrawArgs,
)
from engram_memory.wire.converter import (
    ARGS_BY_TOOL,
    TOOL_NAMES,
    ToolArgs,
    make_converter,
    parse_args,
    parse_json,
    unstructure_args,
)
from engram_memory.wire.descriptors import tool_descriptors
from engram_memory.wire.envelope import (
    failure_envelope,
    success_envelope,
    to_envelope,
    to_mcp_call_result,
)
from engram_memory.wire.schemas import input_schema, output_envelope_schema, output_schema

__all__ = [
    "ARGS_BY_TOOL",
    "TOOL_NAMES",
    "CaptureArgs",
    "Citation",
    "Component",
    "Evidence",
    "ForgetArgs",
    "GetArgs",
    "Locator",
    "Payload",
    "PrimaryEvent",
    "Reconciliation",
    "RequestAdmissionArgs",
    "Retention",
    "SearchArgs",
    "SearchCapabilityPolicy",
    "ToolArgs",
    "ValidTime",
    "WithdrawArgs",
    "failure_envelope",
    "input_schema",
    "make_converter",
    "output_envelope_schema",
    "output_schema",
    "parse_args",
    "parse_json",
    "success_envelope",
    "to_envelope",
    "to_mcp_call_result",
    "tool_descriptors",
    "unstructure_args",
]
