"""Every ```python block of README.md and docs/*.md runs, in order, per file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_python_blocks_run(document: Path) -> None:
    blocks = _BLOCK.findall(document.read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": f"docs_{document.stem}"}
    for block in blocks:
        exec(compile(block, str(document), "exec"), namespace)  # noqa: S102 - our own documentation
