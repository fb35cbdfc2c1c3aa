"""engram-memory: governed, cited, tenant-isolated long-term memory for AI agents.

An agent touches memory only through six operations (search, get, capture, request_admission,
withdraw, forget). The host owns tenant, workspace, principal, purpose, deadlines and human
confirmations; captured material stays an encrypted pending candidate until the host's policy
admits it; withdraw and forget erase for real.
"""

from engram_memory._version import __version__
from engram_memory.admin import MemoryAdmin, PendingCandidate
from engram_memory.clock import ManualClock, SystemClock
from engram_memory.connect import connect
from engram_memory.context import ALL_TOOLS, Confirmation, HostBinding
from engram_memory.errors import EngramError, ErrorCode, JsonRpcCode, ProtocolError
from engram_memory.policy import DefaultPolicy
from engram_memory.service import MemoryService

__all__ = [
    "ALL_TOOLS",
    "Confirmation",
    "DefaultPolicy",
    "EngramError",
    "ErrorCode",
    "HostBinding",
    "JsonRpcCode",
    "ManualClock",
    "MemoryAdmin",
    "MemoryService",
    "PendingCandidate",
    "ProtocolError",
    "SystemClock",
    "__version__",
    "connect",
]
