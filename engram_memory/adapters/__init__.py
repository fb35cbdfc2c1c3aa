"""Transport adapters around :class:`~engram_memory.MemoryService`.

Each adapter lives in its own module and imports its optional dependency itself; importing this
package imports nothing optional. The core never imports an adapter.

* :mod:`engram_memory.adapters.mcp` — the MCP server (extra ``engram-memory-core[mcp]``).
"""

__all__: list[str] = []
