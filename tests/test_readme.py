"""The README shows what the code does: its demo output block is the demo's output, verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
_DEMO_BLOCK = re.compile(r"<!-- demo-output:start -->\n```text\n(.*?)```\n<!-- demo-output:end -->", re.DOTALL)
_QUICKSTART = re.compile(r"^## Quickstart\n(.*?)(?=^## )", re.MULTILINE | re.DOTALL)


def _documented_demo_output() -> str:
    blocks = _DEMO_BLOCK.findall(README.read_text(encoding="utf-8"))
    assert len(blocks) == 1, "README.md needs exactly one demo-output block between its markers"
    block: str = blocks[0]
    return block


def test_the_readme_shows_the_quickstart_demo_output_verbatim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart runs ``engram-memory demo`` without ``--db``: on a temporary file, left nowhere."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    assert capsys.readouterr().out == _documented_demo_output()
    assert list(tmp_path.iterdir()) == []


def test_with_db_only_the_first_line_differs_as_the_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = "engram-memory demo on demo.db (two tenants: acme, globex)"
    assert main(["demo", "--db", str(tmp_path / "demo.db")]) == 0
    lines = capsys.readouterr().out.splitlines()
    documented = _documented_demo_output().splitlines()
    assert lines[0] == header
    assert lines[1:] == documented[1:]
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert f"With `--db demo.db` the first line names the file instead: `{header}`" in readme


def test_the_quickstart_has_the_two_commands_the_check_script_runs() -> None:
    """``scripts/check_quickstart.sh`` runs the Quickstart's ``sh`` blocks; keep them two, one line each."""
    section = _QUICKSTART.search(README.read_text(encoding="utf-8"))
    assert section is not None, "README.md has no '## Quickstart' section"
    commands = re.findall(r"```sh\n(.*?)```", section.group(1), re.DOTALL)
    assert len(commands) == 2
    assert all(command.count("\n") == 1 for command in commands)
    assert "engram-memory demo" in commands[0]
    assert "pytest" in commands[1]
