"""Transport adapters around :class:`~engram_memory.MemoryService`.

Each adapter lives in its own module and imports its optional dependency itself; importing this
package imports nothing optional. The core never imports an adapter.

* :mod:`engram_memory.adapters.mcp` — the MCP server (the ``mcp`` extra: :data:`MCP_EXTRA`).
  Importing it without the extra raises :class:`ModuleNotFoundError` naming the missing module
  (``.name``) and saying how to install the extra.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MCP_EXTRA"]

MCP_EXTRA: Final = 'the mcp extra: pip install ".[mcp]" from a clone (engram-memory-core[mcp] once on PyPI)'
"""How to get the MCP adapter's dependencies; ``serve-mcp`` and the adapter's import error say it."""
