"""Every ```python block of README.md and docs/*.md runs, in order, per file."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from engram_memory.ports import KeyVault
from engram_memory.testing import (
    KeyVaultConformance,
    PolicyConformance,
    RankerConformance,
    ServiceConformance,
    StoreConformance,
)
from engram_memory.testing.keyvault import CompleteDestruction

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
WITH_EXAMPLES = ("README.md", "backends.md", "contract.md", "operations.md", "tutorial.md")
"""The documents that carry Python examples; a document that loses its examples, or gains some, fails."""


def test_the_documents_with_examples_are_the_expected_ones() -> None:
    having = {path.name for path in DOCUMENTS if _BLOCK.search(path.read_text(encoding="utf-8"))}
    assert having == set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_python_blocks_run(name: str) -> None:
    document = ROOT / name if name == "README.md" else ROOT / "docs" / name
    blocks = _BLOCK.findall(document.read_text(encoding="utf-8"))
    assert blocks
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


def _collected(kit: type) -> int:
    """How many tests pytest collects from a binding of ``kit``: each test once per combination of its parameters.

    The kits parametrize tests with ``pytest.mark.parametrize`` only (no parametrized fixtures).
    """
    total = 0
    for name in dir(kit):
        if name.startswith("test_"):
            cases = 1
            for mark in getattr(getattr(kit, name), "pytestmark", []):
                if mark.name == "parametrize":
                    cases *= len(mark.args[1])
            total += cases
    return total


def test_backends_md_states_each_conformance_kit_s_test_count() -> None:
    """docs/backends.md says how many tests each kit has ("N tests"), and, when some take parameters, how many
    pytest collects ("N tests, M with parameters"); the counts follow the kits."""
    text = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    for kit in (StoreConformance, KeyVaultConformance, RankerConformance, ServiceConformance, PolicyConformance):
        stated = re.search(rf"`{kit.__name__}`[^(]*\((\d+) tests(?:, (\d+) with parameters)?[;)]", text)
        assert stated is not None, kit.__name__
        tests = len([name for name in dir(kit) if name.startswith("test_")])
        assert int(stated.group(1)) == tests, kit.__name__
        assert int(stated.group(2) or tests) == _collected(kit), f"{kit.__name__}: state the count with parameters"
