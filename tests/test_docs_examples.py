"""Every ```python block of README.md and docs/*.md runs, in order, per file."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from engram_memory.ports import KeyVault
from engram_memory.testing import KeyVaultConformance
from engram_memory.testing.keyvault import CompleteDestruction

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_python_blocks_run(document: Path) -> None:
    blocks = _BLOCK.findall(document.read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": f"docs_{document.stem}"}
    for block in blocks:
        exec(compile(block, str(document), "exec"), namespace)  # noqa: S102 - our own documentation


@functools.cache
def _namespace(document: str) -> dict[str, object]:
    """What the Python blocks of ``docs/<document>`` define, run once."""
    namespace: dict[str, object] = {"__name__": f"docs_{Path(document).stem}"}
    path = ROOT / "docs" / document
    for block in _BLOCK.findall(path.read_text(encoding="utf-8")):
        exec(compile(block, str(path), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace


class TestTheDocumentedKmsVaultConforms(KeyVaultConformance):
    """docs/backends.md says its ``ScheduledDeletionVault`` passes the KeyVault suite: it does."""

    @pytest.fixture
    def vault(self) -> KeyVault:
        factory = _namespace("backends.md")["ScheduledDeletionVault"]
        assert callable(factory)
        made: KeyVault = factory()
        return made

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        return lambda vault: vault.purge()  # type: ignore[attr-defined]  # the documented scheduled deletion
