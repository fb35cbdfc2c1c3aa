"""What the SQLite worker processes and the tests that drive them agree on."""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from engram_memory.context import HostBinding
from engram_memory.testing import make_binding

SCOPES: Final = (("tenant-worker", "workspace-1"), ("tenant-worker", "workspace-2"))
PRINCIPAL: Final = "principal-worker"


def binding(scope: int, principal: str = PRINCIPAL) -> HostBinding:
    """The binding a worker (and the test that checks its work) uses for scope number ``scope``."""
    tenant, workspace = SCOPES[scope]
    return make_binding(tenant, workspace, principal)


def emit(line: dict[str, Any]) -> None:
    """Print one JSON line and flush it, so that a reader has it even if the process dies next."""
    sys.stdout.write(json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n")
    sys.stdout.flush()
