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
from engram_memory.wire.envelope import (
    failure_envelope,
    success_envelope,
    to_envelope,
    to_mcp_call_result,
)

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
    "make_converter",
    "parse_args",
    "parse_json",
    "success_envelope",
    "to_envelope",
    "to_mcp_call_result",
    "unstructure_args",
]
