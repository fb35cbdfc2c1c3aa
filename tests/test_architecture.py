"""Architecture rules enforced by scanning the source with ``ast`` (DESIGN §1 rule 1).

The core — everything in ``engram_memory`` except the SQLite adapters, ``adapters/``, ``testing/``
and the CLI — imports no driver (``sqlite3``, ``psycopg``, ``mcp``) and no test tool (``pytest``,
``hypothesis``), reads no environment variable, and only ``clock.py`` reads the system time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import engram_memory

PACKAGE = Path(engram_memory.__file__).resolve().parent
"""The package as imported: the source tree, or the installed wheel when CI tests the wheel."""
FORBIDDEN_MODULES = frozenset({"sqlite3", "psycopg", "psycopg2", "mcp", "pytest", "hypothesis", "_pytest"})
SYSTEM_TIME_CALLS = frozenset({"now", "utcnow", "today"})


def _is_core(relative: Path) -> bool:
    top = relative.parts[0]
    if top in {"adapters", "testing"} or top.startswith("cli"):
        return False
    return not (top in {"stores", "keyvaults"} and len(relative.parts) > 1 and relative.parts[1].startswith("sqlite"))


def core_modules() -> list[Path]:
    """Every core module, relative to the package directory."""
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if _is_core(p.relative_to(PACKAGE)))


def _root(name: str | None) -> str:
    return (name or "").split(".")[0]


def forbidden_imports(tree: ast.AST) -> list[str]:
    """Imports of forbidden modules, wherever they sit (module level, functions, TYPE_CHECKING)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _root(alias.name) in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _root(node.module) in FORBIDDEN_MODULES:
            found.append(node.module or "")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.append("__import__(...)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module":
            found.append("importlib.import_module(...)")
    return found


def environment_reads(tree: ast.AST) -> list[str]:
    """``os.environ`` / ``os.getenv`` / ``os.environb`` uses and ``from os import environ/getenv``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "environb", "getenv", "putenv"}:
            found.append(f"<expr>.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"from os import {a.name}" for a in node.names if a.name in {"environ", "environb", "getenv"}]
        elif isinstance(node, ast.Name) and node.id in {"getenv", "environ"}:
            found.append(node.id)
    return found


def system_time_calls(tree: ast.AST) -> list[str]:
    """Calls such as ``datetime.now(...)``, ``datetime.datetime.utcnow()``, ``date.today()``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in SYSTEM_TIME_CALLS:
            continue
        owner = node.func.value
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if owner_name in {"datetime", "date"}:
            found.append(f"{owner_name}.{node.func.attr}(")
    return found


def _parse(relative: Path) -> ast.AST:
    return ast.parse((PACKAGE / relative).read_text(encoding="utf-8"), filename=str(relative))


CORE = core_modules()


def test_the_scan_sees_the_core() -> None:
    names = {path.as_posix() for path in CORE}
    assert {"service.py", "write_path.py", "clock.py", "stores/memory.py", "keyvaults/memory.py"} <= names
    assert not [n for n in names if n.startswith(("testing/", "adapters/", "cli")) or "sqlite" in n]


@pytest.mark.parametrize("module", CORE, ids=str)
def test_the_core_imports_no_driver_and_no_test_tool(module: Path) -> None:
    assert forbidden_imports(_parse(module)) == []


@pytest.mark.parametrize("module", CORE, ids=str)
def test_the_core_reads_no_environment(module: Path) -> None:
    assert environment_reads(_parse(module)) == []


@pytest.mark.parametrize("module", CORE, ids=str)
def test_only_the_clock_reads_the_system_time(module: Path) -> None:
    calls = system_time_calls(_parse(module))
    if module.as_posix() == "clock.py":
        assert calls == ["datetime.now("]
    else:
        assert calls == []


@pytest.mark.parametrize(
    ("source", "scanner"),
    [
        ("import sqlite3", forbidden_imports),
        ("import mcp.server.lowlevel as low", forbidden_imports),
        ("from mcp.types import Tool", forbidden_imports),
        ("def f():\n    import psycopg", forbidden_imports),
        ("from hypothesis import given", forbidden_imports),
        ("import os\nx = os.environ['X']", environment_reads),
        ("import os\nx = os.getenv('X')", environment_reads),
        ("from os import environ", environment_reads),
        ("from datetime import datetime, UTC\nx = datetime.now(UTC)", system_time_calls),
        ("import datetime\nx = datetime.datetime.now()", system_time_calls),
        ("import datetime\nx = datetime.date.today()", system_time_calls),
    ],
)
def test_each_scanner_catches_a_violation(source: str, scanner: object) -> None:
    assert callable(scanner)
    assert scanner(ast.parse(source)) != []


def test_importing_the_package_imports_no_test_tool_or_driver() -> None:
    code = (
        "import sys, engram_memory\n"
        "watched = ('pytest', 'hypothesis', 'sqlite3', 'mcp', 'engram_memory.testing')\n"
        "bad = sorted(m for m in watched if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    assert result.stdout.strip() == ""


def test_the_ports_type_hints_resolve_at_run_time() -> None:
    """Frameworks that inspect signatures (``typing.get_type_hints``) can read every port's methods."""
    import inspect  # noqa: PLC0415 - local to this test
    import typing  # noqa: PLC0415

    from engram_memory import ports  # noqa: PLC0415

    resolved = []
    for name in ports.__all__:
        port = getattr(ports, name)
        if inspect.isclass(port) and issubclass(port, typing.Protocol):
            for member, function in inspect.getmembers(port, inspect.isfunction):
                if not member.startswith("_"):
                    typing.get_type_hints(function)
                    resolved.append(f"{name}.{member}")
    assert "Policy.redaction_allowlist" in resolved
    assert "StoreReader.eligible_documents" in resolved
